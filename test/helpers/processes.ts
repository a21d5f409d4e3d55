import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect } from 'vitest';
import { fixtureJs } from '../../scripts/dist.ts';
import { Engine } from '../../src/engine/engine.ts';
import { openTestStore, type TestStore } from './store.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A test fixture running as its own OS process, with its output collected line by line. */
export interface Child {
  readonly proc: ChildProcess;
  readonly pid: number;
  readonly lines: string[];
  stderr(): string;
  /** Resolves with the first stdout line (seen so far or later) that `match` accepts. */
  line(match: (line: string) => boolean, timeoutMs: number): Promise<string>;
  /** Resolves when the process has exited; rejects (after SIGKILL) if it outlives `timeoutMs`. */
  exit(timeoutMs: number): Promise<Exit>;
  alive(): boolean;
}

const spawned = new Set<Child>();

/**
 * Run `test/fixtures/<name>.ts`, compiled (test/setup/dist.ts built it into dist/ before the run),
 * with `env` added to this process's environment.
 */
export function spawnFixture(name: string, args: string[], env: Record<string, string>): Child {
  const proc = spawn(process.execPath, [fixtureJs(name), ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const waiting = new Set<() => void>();
  let err = '';
  let partial = '';
  proc.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop()!;
    lines.push(...parts);
    for (const w of waiting) w();
  });
  proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    err += chunk;
  });
  // 'close' comes after the process exited and its output was read to the end.
  let closed = false;
  const exited = new Promise<Exit>((resolve) =>
    proc.once('close', (code, signal) => {
      closed = true;
      if (partial) lines.push(partial);
      for (const w of waiting) w();
      resolve({ code, signal });
    }),
  );

  const child: Child = {
    proc,
    pid: proc.pid!,
    lines,
    stderr: () => err,
    alive: () => proc.exitCode === null && proc.signalCode === null,
    line(match, timeoutMs) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = lines.find(match);
          if (found !== undefined) return done(() => resolve(found));
          if (closed) return done(() => reject(new Error(`${name} (pid ${proc.pid}) exited without the expected line; stderr:\n${err}`)));
        };
        const timer = setTimeout(
          () => done(() => reject(new Error(`${name} (pid ${proc.pid}): no expected line within ${timeoutMs} ms; stderr:\n${err}`))),
          timeoutMs,
        );
        function done(settle: () => void) {
          clearTimeout(timer);
          waiting.delete(check);
          settle();
        }
        waiting.add(check);
        check();
      });
    },
    async exit(timeoutMs) {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), timeoutMs)));
      const out = await Promise.race([exited, late]);
      clearTimeout(timer);
      if (out !== 'late') return out;
      proc.kill('SIGKILL');
      await exited;
      throw new Error(`${name} (pid ${proc.pid}) did not exit within ${timeoutMs} ms and was killed; stderr:\n${err}`);
    },
  };
  spawned.add(child);
  return child;
}

/**
 * For afterAll: SIGKILL every fixture process still alive, wait until each has exited, and
 * return the pids that had to be killed (a test that leaves one behind has leaked it).
 */
export async function killLeftoverChildren(): Promise<number[]> {
  const leaked = [...spawned].filter((c) => c.alive());
  for (const c of leaked) c.proc.kill('SIGKILL');
  await Promise.all(leaked.map((c) => c.exit(5_000)));
  const stillAlive = [...spawned].filter((c) => c.alive());
  if (stillAlive.length > 0) throw new Error(`fixture processes survived SIGKILL: ${stillAlive.map((c) => c.pid).join(', ')}`);
  spawned.clear();
  return leaked.map((c) => c.pid);
}

/**
 * The set-up of a test file whose tests run fixture processes against one store: before all, a
 * fresh store and an engine on it (`use` receives them); after all, every fixture process still
 * alive is killed first (a live child holds connections and locks on the schema being dropped),
 * the store is dropped, and the file fails if any child had outlived its test.
 */
export function useStoreWithChildren(use: (ts: TestStore, engine: Engine) => void): void {
  let ts: TestStore | undefined;
  let engine: Engine | undefined;
  beforeAll(async () => {
    ts = await openTestStore();
    engine = new Engine({ store: ts.store, nodeId: 'test-node' });
    use(ts, engine);
  });
  afterAll(async () => {
    const leaked = await killLeftoverChildren();
    engine?.close();
    await ts?.cleanup();
    expect(leaked, 'fixture processes still alive after the tests').toEqual([]);
  });
}
