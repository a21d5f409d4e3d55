/**
 * CPU accounting for one measured phase (Linux /proc): how much CPU this process, the server
 * process and everything else on the machine used. On a shared 2-core box "everything else"
 * shows whether another job disturbed the measurement (for PostgreSQL runs it also contains
 * the PostgreSQL backends serving the benchmark).
 */
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { sleep } from './stats.ts';

const TICK = 100; // USER_HZ on Linux

function machine(): { busy: number; total: number } | null {
  try {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const [user, nice, system, idle, iowait, irq, softirq, steal] = f as [number, number, number, number, number, number, number, number];
    const busy = user + nice + system + irq + softirq + (steal ?? 0);
    return { busy, total: busy + idle + iowait };
  } catch {
    return null;
  }
}

/** CPU ticks (1/100 s) a process used so far, user + system; null when it is gone. */
export function proc(pid: number): number | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]); // utime, stime (fields 14, 15)
  } catch {
    return null;
  }
}

export interface CpuUse {
  wall_s: number;
  /** CPU seconds. */
  bench_s: number;
  server_s: number | null;
  /** PostgreSQL runs: CPU of the backends serving this benchmark's connections. */
  postgres_s?: number | null;
  /** Everything else on the machine (other jobs; for PostgreSQL runs minus postgres_s). */
  other_s: number | null;
  /** Busy share of all cores over the phase, %. */
  machine_busy_pct: number | null;
}

/**
 * The PostgreSQL backends serving connections opened by `pids`: local ports from `ss`, matched
 * to pg_stat_activity.client_port. Returns backend pid → CPU ticks so far. Best effort: {} when
 * `ss` or the query fails.
 */
export async function pgBackendTicks(pgUrl: string, pids: number[]): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  let ports: Set<number>;
  try {
    const text = execFileSync('ss', ['-tnpH', 'dport = :5432'], { encoding: 'utf8' });
    ports = new Set<number>();
    for (const line of text.split('\n')) {
      if (!pids.some((p) => line.includes(`pid=${p},`))) continue;
      const local = line.trim().split(/\s+/)[3] ?? '';
      ports.add(Number(local.slice(local.lastIndexOf(':') + 1)));
    }
  } catch {
    return out;
  }
  if (ports.size === 0) return out;
  const client = new pg.Client({ connectionString: pgUrl });
  try {
    await client.connect();
    const r = await client.query('SELECT pid, client_port FROM pg_stat_activity WHERE client_port = ANY($1::int[])', [[...ports]]);
    for (const row of r.rows) {
      const t = proc(Number(row.pid));
      if (t !== null) out.set(Number(row.pid), t);
    }
  } catch {
    /* best effort */
  } finally {
    await client.end().catch(() => {});
  }
  return out;
}

/**
 * `perf record` of the processes `pids` (PostgreSQL backends, from pgBackendTicks) into
 * `<prefix>-<label>.data` (with DWARF call graphs where BENCH_PG_PERF_G is set), until the
 * returned function stops it. Nothing where `prefix` is unset or there is no process.
 */
export function perfRecord(prefix: string | undefined, label: string, pids: number[]): (() => Promise<void>) | undefined {
  if (!prefix || pids.length === 0) return undefined;
  const graph = process.env.BENCH_PG_PERF_G ? ['--call-graph', 'dwarf,16384'] : [];
  const child = spawn('perf', ['record', ...graph, '-F', '999', '-o', `${prefix}-${label}.data`, '-p', pids.join(',')], {
    stdio: 'ignore',
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  return async () => {
    child.kill('SIGINT');
    await exited;
  };
}

export function cpuMeter(serverPid?: number) {
  const t0 = performance.now();
  const m0 = machine();
  const self0 = proc(process.pid);
  const srv0 = serverPid && serverPid !== process.pid ? proc(serverPid) : null;
  return {
    /** `pgBefore` / `pgAfter`: backend ticks from pgBackendTicks at the start and the end. */
    stop(pgBefore?: Map<number, number>, pgAfter?: Map<number, number>): CpuUse {
      const m1 = machine();
      const self1 = proc(process.pid);
      const srv1 = serverPid && serverPid !== process.pid ? proc(serverPid) : null;
      const bench = self0 !== null && self1 !== null ? (self1 - self0) / TICK : NaN;
      const server = srv0 !== null && srv1 !== null ? (srv1 - srv0) / TICK : null;
      const busy = m0 && m1 ? (m1.busy - m0.busy) / TICK : null;
      let postgres: number | null = null;
      if (pgAfter && pgAfter.size > 0) {
        postgres = 0;
        for (const [pid, t] of pgAfter) postgres += (t - (pgBefore?.get(pid) ?? 0)) / TICK;
      }
      const r = (x: number) => Math.round(x * 100) / 100;
      return {
        wall_s: r((performance.now() - t0) / 1000),
        bench_s: r(bench),
        server_s: server === null ? null : r(server),
        ...(pgAfter ? { postgres_s: postgres === null ? null : r(postgres) } : {}),
        other_s: busy === null ? null : r(Math.max(0, busy - bench - (server ?? 0) - (postgres ?? 0))),
        machine_busy_pct: m0 && m1 && m1.total > m0.total ? Math.round((100 * (m1.busy - m0.busy)) / (m1.total - m0.total)) : null,
      };
    },
  };
}

/**
 * Wait (up to `maxMs`) until the machine is quiet: busy below `pct` % over a 1 s sample.
 * Returns the last sample's busy %, or null where /proc is unavailable.
 */
export async function waitForQuiet(pct: number, maxMs: number, onWait?: (busy: number) => void): Promise<number | null> {
  const until = Date.now() + maxMs;
  for (;;) {
    const a = machine();
    await sleep(1000);
    const b = machine();
    if (!a || !b || b.total <= a.total) return null;
    const busy = Math.round((100 * (b.busy - a.busy)) / (b.total - a.total));
    if (busy < pct || Date.now() >= until) return busy;
    onWait?.(busy);
  }
}
