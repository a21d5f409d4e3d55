/**
 * Scheduler benchmark: N schedules due at the same instant on one PostgreSQL database, fired by
 * `processes` real `baton up` processes (scheduler, reaper, dispatcher and canary loops all
 * running, as in production). Fire lag = due time → the execution row is visible to another
 * connection. Target: p99 ≤ 1 s for 10,000 schedules on PostgreSQL.
 */
import { sql } from 'kysely';
import { Engine } from '../../src/engine/engine.ts';
import { newScheduleId } from '../../src/engine/triggers/schedules.ts';
import type { StoreKind } from '../../src/store/adapter.ts';
import { startServer, type RunningServer } from './server.ts';
import { cpuMeter } from './cpu.ts';
import { sleep, summarize, type LatencySummary } from './stats.ts';
import { freshDb, type BenchDb } from './stores.ts';

export interface FireLagConfig {
  store: StoreKind;
  pgUrl: string;
  schedules: number; // default 10,000
  agents: number; // default 100
  processes: number; // `baton up` processes, default 3
  leadMs: number; // how far ahead of the last process start the common due time is set, default 3,000
  /** Use this database (kept afterwards) instead of a fresh one; the history scenario fires on a full store. */
  db?: BenchDb;
  /** Agent names: `${agentPrefix}${i}`, created if missing (default 'fl-'). */
  agentPrefix: string;
  /** Ports for the `baton up` processes: basePort, basePort + 1, … (default: any free port). */
  basePort?: number;
  /** Extra BATON_* variables for the `baton up` processes. */
  serverEnv?: Record<string, string>;
}

export interface FireLagResult {
  store: StoreKind;
  schedules: number;
  processes: number;
  fired: number;
  lagMs: LatencySummary;
  /** From the due time until the last execution existed. */
  drainMs: number;
  /** CPU seconds the whole machine used from the due time until the last execution existed. */
  cpuS: number | null;
  /** Busy share of all cores over that time, %. */
  machineBusyPct: number | null;
}

/** SQLite runs: how long `baton up` may take to start between inserting the schedules and their due time. */
const SERVER_START_ALLOWANCE_MS = 8_000;

export async function runFireLag(c: Partial<FireLagConfig> & { pgUrl: string }): Promise<FireLagResult> {
  const cfg: FireLagConfig = { store: 'postgres', schedules: 10_000, agents: 100, processes: 3, leadMs: 3_000, agentPrefix: 'fl-', ...c };
  const db = cfg.db ?? freshDb(cfg.store, cfg.pgUrl, 'firelag');
  const stores = [];
  const servers: RunningServer[] = [];
  try {
    const setup = await db.open({ poolMax: 4 });
    stores.push(setup);
    const admin = new Engine({ store: setup, nodeId: 'bench-setup' });
    const existing = new Set((await setup.db.selectFrom('agents').select('name').execute()).map((r) => r.name));
    for (let a = 0; a < cfg.agents; a++) {
      if (!existing.has(`${cfg.agentPrefix}${a}`))
        await admin.agents.create({ name: `${cfg.agentPrefix}${a}`, max_backlog: 1_000_000 }, 'bench');
    }
    admin.close();
    const startServers = async () => {
      // One at a time: the first creates the admin key file the others then read.
      for (let p = 0; p < cfg.processes; p++)
        servers.push(
          await startServer(db, 'spawn', { port: cfg.basePort === undefined ? undefined : cfg.basePort + p, env: cfg.serverEnv }),
        );
    };
    // SQLite: one process per file, and a server learns of new schedules only from its own
    // process; so the schedules go in first and the server starts before they come due.
    const insertFirst = cfg.store === 'sqlite';
    if (!insertFirst) await startServers();
    const due = Math.ceil((Date.now() + cfg.leadMs + (insertFirst ? SERVER_START_ALLOWANCE_MS : 0)) / 1000) * 1000;
    const now = Date.now();
    const rows = Array.from({ length: cfg.schedules }, (_, i) => ({
      id: newScheduleId(),
      agent: `${cfg.agentPrefix}${i % cfg.agents}`,
      name: `s-${i}`,
      cron: '0 0 1 1 *', // once a year: after this due time the next is far away
      timezone: 'UTC',
      message: 'bench',
      payload: 'null',
      enabled: 1,
      overlap_policy: 'allow' as const,
      misfire_policy: 'run_once' as const,
      misfire_grace_seconds: 3600,
      retry_policy: null,
      priority: 0,
      next_run_at: due,
      last_run_at: null,
      created_at: now,
      updated_at: now,
    }));
    for (let i = 0; i < rows.length; i += 500)
      await setup.db
        .insertInto('schedules')
        .values(rows.slice(i, i + 500))
        .execute();

    // The schedules existed before they came due: let the planner know the table as it would
    // after autovacuum, instead of planning for the empty table it saw a moment ago.
    await sql`ANALYZE schedules`.execute(setup.db);
    if (insertFirst) {
      await setup.close();
      stores.length = 0;
      await startServers();
      if (Date.now() > due - 500) throw new Error(`baton up took too long to start: less than 500 ms before the schedules came due`);
      const again = await db.open({ poolMax: 2 });
      stores.push(again);
    }
    const reader = stores[0]!;

    // Fire lag as a client sees it: when each execution row became visible. The count is
    // polled every 20 ms; the k-th row's lag is the first poll that saw at least k rows.
    const deadline = Date.now() + cfg.leadMs + 120_000;
    await sleep(Math.max(0, due - Date.now()));
    const meter = cpuMeter();
    const seenAt: Array<[number, number]> = [];
    let fired = 0;
    while (Date.now() < deadline) {
      // Only rows created since the due time: on a store full of history a count of every row
      // would cost more than the polling interval.
      fired = Number(
        (
          await reader.db
            .selectFrom('executions')
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .where('created_at', '>=', due)
            .executeTakeFirstOrThrow()
        ).n,
      );
      const t = Date.now();
      if (fired > 0 && (seenAt.length === 0 || seenAt[seenAt.length - 1]![1] < fired)) seenAt.push([t, fired]);
      if (fired >= cfg.schedules) break;
      await sleep(20);
    }
    const cpu = meter.stop();
    const sample: number[] = [];
    let prev = 0;
    for (const [t, count] of seenAt) {
      for (let k = prev; k < count; k++) sample.push(t - due);
      prev = count;
    }
    return {
      store: cfg.store,
      schedules: cfg.schedules,
      processes: cfg.processes,
      fired,
      lagMs: summarize(sample),
      drainMs: Math.max(...sample),
      cpuS: cpu.other_s === null ? null : Math.round((cpu.bench_s + cpu.other_s) * 100) / 100,
      machineBusyPct: cpu.machine_busy_pct,
    };
  } finally {
    await Promise.all(servers.map((srv) => srv.stop()));
    for (const s of stores) await s.close().catch(() => {});
    if (!cfg.db) await db.cleanup();
  }
}
