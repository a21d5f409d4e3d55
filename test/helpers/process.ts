import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';

/**
 * The `baton` command as the tests start it: the compiled dist/ (test/helpers/baton.js), which
 * test/setup/dist.ts brings up to date with src/ before every run.
 */
export const BATON_BIN = fileURLToPath(new URL('./baton.js', import.meta.url));

/** Ports tests hand to the processes they start: below Linux's ephemeral range (32768-60999). */
const PORTS = { from: 20_000, to: 32_767 };
/** Slices of the range, one per Vitest worker (VITEST_POOL_ID); more than any maxWorkers used here. */
const SLICES = 8;
let cursor = -1;

/**
 * A port that was free a moment ago, for a process the test starts to listen on. It is taken from
 * this Vitest worker's own slice of a range below the kernel's ephemeral ports (which Linux draws
 * from for every outgoing connection and every `listen(0)`): between this check and the child's
 * bind, no file running beside this one picks the same port, and no connection's local port can
 * be it. BATON_TEST_PORTS=FROM-TO sets the range instead (a machine shared with other runs).
 */
export async function freePort(): Promise<number> {
  const set = process.env.BATON_TEST_PORTS?.match(/^(\d+)-(\d+)$/);
  const range = set ? { from: Number(set[1]), to: Number(set[2]) } : PORTS;
  const size = Math.floor((range.to - range.from + 1) / SLICES);
  const slice = (Number(process.env.VITEST_POOL_ID ?? 1) - 1) % SLICES;
  const first = range.from + slice * size;
  if (cursor < 0) cursor = Math.floor(Math.random() * size);
  for (let i = 0; i < size; i++) {
    const port = first + (cursor++ % size);
    if (await isFree(port)) return port;
  }
  throw new Error(`no free port in ${first}-${first + size - 1}`);
}

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

export interface Child {
  proc: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

/** Spawn a child; its stdout+stderr are kept for diagnosis. Tracked so tests can assert none leak. */
export function spawnChild(args: string[], env: Record<string, string>): Child {
  const proc = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  return { proc, output: () => out, exited };
}

/** SIGTERM `child` and wait for it to exit; SIGKILL if it has not within `graceMs`. */
export async function stopChild(child: Child | undefined, graceMs = 10_000): Promise<void> {
  if (!child || child.proc.exitCode !== null || child.proc.signalCode !== null) return;
  child.proc.kill('SIGTERM');
  const t = setTimeout(() => child.proc.kill('SIGKILL'), graceMs);
  await child.exited;
  clearTimeout(t);
}

/** Start `baton up` as a real OS process and wait until /readyz answers. */
export async function startBatonUp(env: Record<string, string>, port: number): Promise<Child & { url: string }> {
  const child = spawnChild([BATON_BIN, 'up'], { BATON_LOG_LEVEL: 'warn', ...env, BATON_PORT: String(port) });
  const url = `http://127.0.0.1:${port}`;
  const until = Date.now() + 30_000;
  for (;;) {
    if (child.proc.exitCode !== null) throw new Error(`baton up exited early:\n${child.output()}`);
    try {
      const r = await fetch(url + '/readyz');
      if (r.ok) return { ...child, url };
    } catch {
      /* not yet listening */
    }
    if (Date.now() > until) {
      child.proc.kill('SIGKILL');
      throw new Error(`baton up did not become ready:\n${child.output()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** How long one `baton` CLI run may take before the test calls it hung (a loaded 2-core machine). */
export const SPAWN_TIMEOUT_MS = 120_000;

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `baton ...args` as real processes against a test's server. Spawned asynchronously: a
 * synchronous spawn would block the in-process server it talks to. Only the BATON_* variables of
 * `connection()` and of each call's `env` reach the child. `killAll()` ends any left running.
 */
export function cliRunner(connection: () => Record<string, string | undefined>) {
  const children = new Set<ChildProcess>();
  const base = () => Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('BATON_')));
  return {
    run(args: string[], env: Record<string, string | undefined> = {}): Promise<CliRun> {
      const proc = spawn(process.execPath, [BATON_BIN, ...args], {
        env: { ...base(), ...connection(), ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.add(proc);
      let stdout = '';
      let stderr = '';
      proc.stdout!.setEncoding('utf8').on('data', (c: string) => (stdout += c));
      proc.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          proc.kill('SIGKILL');
          reject(new Error(`baton ${args.join(' ')} did not exit within ${SPAWN_TIMEOUT_MS / 1000} s; stderr:\n${stderr}`));
        }, SPAWN_TIMEOUT_MS);
        proc.once('close', (code) => {
          clearTimeout(timer);
          children.delete(proc);
          resolve({ code, stdout, stderr });
        });
      });
    },
    killAll(): void {
      for (const c of children) c.kill('SIGKILL');
    },
  };
}
