/**
 * A Baton server for the HTTP benchmarks: by default `baton up` as its own OS process (so the
 * server and the load generator do not share one event loop), or `startNode` in this process
 * (`--server inproc`, for comparison).
 *
 * The spawned server runs the compiled JavaScript in dist/, as an installed package runs it
 * (brought up to date with src/ first, as the suite does: scripts/dist.ts), not the checkout's
 * TypeScript through tsx, whose transform adds a `__name` call to every function it defines (2 %
 * of a W1-users server's busy time, 5 % of the submit route's, in a profile). BENCH_SERVER_TSX=1
 * runs `bin/baton.js up` from the checkout instead.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildForTests } from '../../scripts/dist.ts';
import type { BenchDb } from './stores.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface RunningServer {
  url: string;
  key: string;
  how: 'spawn' | 'inproc';
  pid: number;
  stop(): Promise<void>;
}

const children = new Set<ChildProcess>();

/**
 * `port`: listen there instead of on a free port the OS picks; `env`: extra BATON_* variables
 * for the spawned process (e.g. BATON_RETENTION_DAYS). Both apply to `spawn` only.
 */
export interface ServerOptions {
  cpuProfDir?: string;
  port?: number;
  env?: Record<string, string>;
  /** Run this script (relative to the repository, with tsx) instead of `bin/baton.js up`. */
  script?: string;
}

export async function startServer(db: BenchDb, how: 'spawn' | 'inproc', opts: ServerOptions = {}): Promise<RunningServer> {
  return how === 'spawn' ? spawnServer(db, opts) : inprocServer(db);
}

let built = false;

/** How the spawned server starts: dist/'s `baton up`, built once a bench run (see the header). */
function upEntry(): string[] {
  if (process.env.BENCH_SERVER_TSX === '1') return ['bin/baton.js', 'up'];
  if (!built) buildForTests();
  built = true;
  return ['bench/lib/baton-dist.mjs', 'up'];
}

async function inprocServer(db: BenchDb): Promise<RunningServer> {
  const { startNode } = await import('../../src/server/up.ts');
  const node = await startNode({
    env: { dataDir: db.dataDir, databaseUrl: db.url, pgSchema: db.schema, port: 0, host: '127.0.0.1' },
    logger: false,
  });
  const key = node.createdAdminKey ?? readFileSync(join(db.dataDir, 'admin.key'), 'utf8').trim();
  return { url: node.url, key, how: 'inproc', pid: process.pid, stop: () => node.stop() };
}

async function spawnServer(db: BenchDb, opts: ServerOptions): Promise<RunningServer> {
  // Only the variables that select this database: an inherited BATON_DATABASE_URL must not
  // turn a SQLite run into a PostgreSQL one.
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('BATON_')) delete env[k];
  Object.assign(env, db.env, { BATON_PORT: String(opts.port ?? 0), BATON_HOST: '127.0.0.1', BATON_LOG_LEVEL: 'info' }, opts.env);
  // BENCH_SERVER_NODE_ARGS adds node flags for diagnosis (e.g. "--report-on-signal").
  const extra = process.env.BENCH_SERVER_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  // BENCH_LOOP_STALLS=<file>: the server logs its event loop's stalls there (bench/lib/loop-stalls.mjs).
  if (process.env.BENCH_LOOP_STALLS) extra.push('--import', './bench/lib/loop-stalls.mjs');
  const nodeArgs = [...(opts.cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', opts.cpuProfDir] : []), ...extra];
  const entry = opts.script ? ['--import', 'tsx', opts.script] : upEntry();
  const child = spawn(process.execPath, [...nodeArgs, ...entry], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  let stderr = '';
  let partial = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => {
    stderr = (stderr + c).slice(-20_000);
    if (process.env.BENCH_SERVER_STDERR) process.stderr.write(c);
  });
  const url = await new Promise<string>((resolve, reject) => {
    // 90 s: on a loaded machine (many jobs on two cores) loading and migrating took over 30 s.
    const timer = setTimeout(() => reject(new Error(`baton up did not report its address within 90 s; stderr:\n${stderr}`)), 90_000);
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      const parts = (partial + chunk).split('\n');
      partial = parts.pop()!;
      for (const line of parts) {
        if (process.env.BENCH_SERVER_STDOUT) process.stderr.write(`[server] ${line}\n`);
        try {
          const j = JSON.parse(line);
          if (j.msg === 'baton is up' && typeof j.url === 'string') {
            clearTimeout(timer);
            resolve(j.url);
          } else if (j.level >= 50) {
            stderr += `\n[server log] ${line}`;
          }
        } catch {
          /* not a log line */
        }
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`baton up exited (code ${code}, signal ${signal}) before serving; stderr:\n${stderr}`));
    });
  });
  const key = readFileSync(join(db.dataDir, 'admin.key'), 'utf8').trim();
  let stopping: Promise<void> | undefined;
  return {
    url,
    key,
    how: 'spawn',
    pid: child.pid!,
    /**
     * SIGTERM, then SIGKILL after 15 s. Note: `baton up` does not exit while a client holds an
     * open connection on which no request was sent (Node's fetch pool leaves such sockets when
     * queued requests are aborted); the drivers close their pool before the server is stopped.
     */
    stop() {
      stopping ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) {
          const t0 = Date.now();
          child.kill('SIGTERM');
          let killed = false;
          const timer = setTimeout(() => {
            killed = true;
            child.kill('SIGKILL');
          }, 15_000);
          await exited;
          clearTimeout(timer);
          if (killed) process.stderr.write(`  note: baton up (pid ${child.pid}) did not exit within 15 s of SIGTERM; killed it\n`);
          else if (Date.now() - t0 > 3000)
            process.stderr.write(`  note: baton up (pid ${child.pid}) took ${Date.now() - t0} ms to stop after SIGTERM\n`);
        }
        children.delete(child);
      })();
      return stopping;
    },
  };
}

/** Last-resort cleanup: kill the server processes this benchmark started (by their pid). */
export function killChildren(): void {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  children.clear();
}

/**
 * The port for the next server a bench starts: within BATON_TEST_PORTS (lo-hi) when it is set, so
 * runs on a shared machine stay in their range, from a random place in it (two benches started
 * side by side in one range seldom collide) and then the next each time; else 0 (the OS picks).
 */
let portOffset: number | undefined;
export function nextPort(): number {
  const m = /^(\d+)-(\d+)$/.exec(process.env.BATON_TEST_PORTS ?? '');
  if (!m) return 0;
  const lo = Number(m[1]);
  const size = Number(m[2]) - lo + 1;
  portOffset = portOffset === undefined ? Math.floor(Math.random() * size) : portOffset + 1;
  return lo + (portOffset % size);
}
