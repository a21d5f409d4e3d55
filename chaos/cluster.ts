/**
 * The deployment under test: `baton up` and `baton worker` as real OS processes, killed with
 * SIGKILL and restarted on the same port / under a new worker id.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const BATON_BIN = fileURLToPath(new URL('../bin/baton.js', import.meta.url));

export interface Proc {
  name: string;
  kind: 'server' | 'worker';
  /** Restarts so far; a worker's id carries it (its lease owner), so a restart is a new owner. */
  generation: number;
  child?: ChildProcess;
  /** Last lines of output, for the report when something goes wrong. */
  tail: string[];
  start(): Promise<void>;
  alive(): boolean;
}

function track(p: Proc, child: ChildProcess) {
  p.child = child;
  const keep = (d: Buffer) => {
    for (const line of d.toString().split('\n')) if (line.trim()) p.tail.push(line.slice(0, 500));
    if (p.tail.length > 40) p.tail.splice(0, p.tail.length - 40);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
}

export function serverProc(name: string, port: number, env: Record<string, string>): Proc & { url: string } {
  const url = `http://127.0.0.1:${port}`;
  const p: Proc & { url: string } = {
    name,
    kind: 'server',
    generation: 0,
    tail: [],
    url,
    alive: () => !!p.child && p.child.exitCode === null && p.child.signalCode === null,
    async start() {
      p.generation++;
      const child = spawn(process.execPath, [BATON_BIN, 'up'], {
        env: { ...process.env, BATON_LOG_LEVEL: 'warn', ...env, BATON_PORT: String(port) },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      track(p, child);
      // Migrations wait for one advisory lock that every schema on the PostgreSQL server shares:
      // on a server other test runs use too, a fresh schema's first start can wait minutes.
      await waitReady(url, p, 180_000);
    },
  };
  return p;
}

export async function waitReady(url: string, p: Proc, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (!p.alive()) throw new Error(`${p.name} exited while starting:\n${p.tail.join('\n')}`);
    try {
      const r = await fetch(url + '/readyz', { signal: AbortSignal.timeout(2_000) });
      if (r.ok) return;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > until) throw new Error(`${p.name} not ready after ${timeoutMs} ms:\n${p.tail.join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export function workerProc(
  name: string,
  agent: string,
  server: () => string,
  key: string,
  concurrency: number,
  command: string[],
  /** More `baton worker` options (before the command). */
  options: string[] = [],
): Proc & { workerId(): string; serverUrl(): string } {
  const p: Proc & { workerId(): string; serverUrl(): string } = {
    name,
    kind: 'worker',
    generation: 0,
    tail: [],
    workerId: () => `chaos-${name}-g${p.generation}`,
    serverUrl: server,
    alive: () => !!p.child && p.child.exitCode === null && p.child.signalCode === null,
    async start() {
      p.generation++;
      const args = [
        BATON_BIN,
        'worker',
        '--server',
        server(),
        '--key',
        key,
        '--agent',
        agent,
        '--concurrency',
        String(concurrency),
        '--worker-id',
        p.workerId(),
        ...options,
        '--',
        ...command,
      ];
      const child = spawn(process.execPath, args, { env: { ...process.env }, stdio: ['ignore', 'pipe', 'pipe'] });
      track(p, child);
      // `baton worker` checks the agent and key before it serves; give it a moment to fail loudly.
      await new Promise((r) => setTimeout(r, 300));
      if (!p.alive()) throw new Error(`${name} exited at start:\n${p.tail.join('\n')}`);
    },
  };
  return p;
}

export function sigkill(p: Proc): void {
  p.child?.kill('SIGKILL');
}

/** Stop everything: SIGTERM, then SIGKILL whatever is still alive after `graceMs`. */
export async function stopAll(procs: Proc[], graceMs = 5_000): Promise<void> {
  const live = procs.filter((p) => p.alive());
  const exited = live.map((p) => new Promise<void>((r) => (p.alive() ? p.child!.once('exit', () => r()) : r())));
  for (const p of live) p.child!.kill('SIGTERM');
  const timer = setTimeout(() => live.forEach((p) => p.alive() && p.child!.kill('SIGKILL')), graceMs);
  await Promise.all(exited);
  clearTimeout(timer);
}
