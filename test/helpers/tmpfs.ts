/**
 * Small tmpfs filesystems for tests of a full disk: mounted in a fresh directory, grown or shrunk
 * in place (`mount -o remount,size=`), unmounted in teardown. Needs root (mount(8)).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe } from 'vitest';

/** Tests that mount filesystems: root on Linux. */
export const canMount = process.platform === 'linux' && process.getuid?.() === 0;
export const describeWithTmpfs = canMount ? describe : describe.skip;

export interface Tmpfs {
  dir: string;
  /** Bytes in use on it now. */
  used(): number;
  /** Make it this many bytes (never below what is in use: tmpfs refuses). */
  resize(bytes: number): void;
  unmount(): void;
}

export function mountTmpfs(prefix: string, bytes: number): Tmpfs {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${bytes},mode=0755`, 'tmpfs', dir]);
  let mounted = true;
  return {
    dir,
    used() {
      const s = statfsSync(dir);
      return (s.blocks - s.bfree) * s.bsize;
    },
    resize(n) {
      execFileSync('mount', ['-o', `remount,size=${n}`, dir]);
    },
    unmount() {
      if (!mounted) return;
      mounted = false;
      execFileSync('umount', ['-l', dir]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
