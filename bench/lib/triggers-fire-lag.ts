/**
 * Scheduler benchmark: N schedules due at the same instant on one database; `processes`
 * scheduler loops (each its own Engine and pool, like separate `baton up` processes) run
 * tickSchedulesOnce on the production interval. Fire lag = execution created_at − due time.
 * Target (issue 3): p99 ≤ 1 s for 10,000 schedules on PostgreSQL.
 */
import { Engine } from '../../src/engine/engine.ts';
import { newScheduleId } from '../../src/engine/triggers/schedules.ts';
import { SCHEDULER_INTERVAL_MS, tickSchedulesOnce } from '../../src/engine/triggers/scheduler.ts';
import type { StoreKind } from '../../src/store/adapter.ts';
import { summarize, type LatencySummary } from './stats.ts';
import { freshDb } from './stores.ts';

export interface FireLagConfig {
  store: StoreKind;
  pgUrl: string;
  schedules: number; // default 10,000
  agents: number; // default 100
  processes: number; // scheduler loops, default 3
  leadMs: number; // how far ahead the common due time is set, default 5,000
}

export interface FireLagResult {
  store: StoreKind;
  schedules: number;
  processes: number;
  fired: number;
  lagMs: LatencySummary;
  /** From the due time until the last execution existed. */
  drainMs: number;
}

export async function runFireLag(c: Partial<FireLagConfig> & { pgUrl: string }): Promise<FireLagResult> {
  const cfg: FireLagConfig = { store: 'postgres', schedules: 10_000, agents: 100, processes: 3, leadMs: 5_000, ...c };
  const db = freshDb(cfg.store, cfg.pgUrl, 'firelag');
  const stores = [];
  try {
    const setup = await db.open({ poolMax: 4 });
    stores.push(setup);
    const admin = new Engine({ store: setup, nodeId: 'bench-setup' });
    for (let a = 0; a < cfg.agents; a++) await admin.createAgent({ name: `fl-${a}`, max_backlog: 1_000_000 }, 'bench');
    const due = Math.ceil((Date.now() + cfg.leadMs) / 1000) * 1000;
    const now = Date.now();
    const rows = Array.from({ length: cfg.schedules }, (_, i) => ({
      id: newScheduleId(),
      agent: `fl-${i % cfg.agents}`,
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
    for (let i = 0; i < rows.length; i += 500) await setup.db.insertInto('schedules').values(rows.slice(i, i + 500)).execute();
    admin.close();

    const loops: Array<Promise<void>> = [];
    let stop = false;
    for (let p = 0; p < cfg.processes; p++) {
      const store = await db.open({ poolMax: 4 });
      stores.push(store);
      const engine = new Engine({ store, nodeId: `bench-sched-${p}` });
      loops.push(
        (async () => {
          while (!stop) {
            await tickSchedulesOnce(engine).catch((err) => console.error(`scheduler ${p}: ${err?.message ?? err}`));
            await new Promise((r) => setTimeout(r, SCHEDULER_INTERVAL_MS * (0.8 + Math.random() * 0.4)));
          }
          engine.close();
        })(),
      );
    }
    // Fire lag as a client sees it: when each execution row became visible. The count is
    // polled every 20 ms; the k-th row's lag is the first poll that saw at least k rows.
    const deadline = Date.now() + cfg.leadMs + 120_000;
    const seenAt: Array<[number, number]> = [];
    let fired = 0;
    while (Date.now() < deadline) {
      fired = Number((await setup.db.selectFrom('executions').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n);
      const t = Date.now();
      if (fired > 0 && (seenAt.length === 0 || seenAt[seenAt.length - 1]![1] < fired)) seenAt.push([t, fired]);
      if (fired >= cfg.schedules) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    stop = true;
    await Promise.all(loops);
    const sample: number[] = [];
    let prev = 0;
    for (const [t, count] of seenAt) {
      for (let k = prev; k < count; k++) sample.push(t - due);
      prev = count;
    }
    return { store: cfg.store, schedules: cfg.schedules, processes: cfg.processes, fired, lagMs: summarize(sample), drainMs: Math.max(...sample) };
  } finally {
    for (const s of stores) await s.close().catch(() => {});
    await db.cleanup();
  }
}
