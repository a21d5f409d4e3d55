/**
 * Time comes from one clock. On PostgreSQL every process stamps and compares times on the
 * database's clock (StoreAdapter.now, src/store/postgres-clock.ts), so a process whose own clock
 * is minutes off neither reaps another's live lease, nor times out its run early, nor fires a
 * schedule before its time, nor writes a lease that the others take for lapsed. Here "a process"
 * is a store of its own on the same schema with a skewed process clock, and its Engine takes no
 * clock of its own, as `baton up` does. SQLite has one process and its clock: the stamps are that.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { createNodeMetrics } from '../../src/metrics.ts';
import { tickSchedulesOnce } from '../../src/engine/triggers/scheduler.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { agentMaker } from '../helpers/agents.ts';
import { describeMultiProcess, openTestStore, PG_URL, STORE_KIND, type TestStore } from '../helpers/store.ts';

const SKEW_MS = 120_000;
const LEASE_S = 30;
const TIMEOUT_S = 60;

let ts: TestStore;
let engine: Engine;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'true-clock' });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

/** The store's own reading of its clock: PostgreSQL's clock_timestamp(), SQLite's process clock. */
async function storeClock(store: StoreAdapter): Promise<number> {
  if (STORE_KIND === 'sqlite') return Date.now();
  const r = await sql<{ ms: number }>`SELECT (extract(epoch from clock_timestamp()) * 1000)::float8 AS ms`.execute(store.db);
  return Number(r.rows[0]!.ms);
}

describe('an engine without a clock of its own stamps by the store', () => {
  const newAgent = agentMaker(() => engine, 'stamp', { max_parallel: 1, lease_ttl_seconds: LEASE_S, breaker: null });

  it('stamps created_at and the lease expiry on the store clock', async () => {
    const agent = await newAgent();
    const before = await storeClock(ts.store);
    const { id } = await engine.submit(agent, { message: 'm' }, 'test');
    const [claimed] = await engine.claim(agent, { owner: 'w' });
    const after = await storeClock(ts.store);
    expect(claimed!.id).toBe(id);
    // The store's clock is this process's plus a measured offset, off by at most the measurement's
    // error (half its shortest round trip, a few ms on a loaded machine); whole milliseconds on one
    // side and a fraction on the other add one more.
    const slack = Math.ceil(ts.store.clockSkew().errorMs) + 1;
    expect(Number(claimed!.created_at)).toBeGreaterThanOrEqual(Math.floor(before) - slack);
    expect(Number(claimed!.created_at)).toBeLessThanOrEqual(Math.ceil(after) + slack);
    expect(Number(claimed!.lease_expires_at)).toBeGreaterThanOrEqual(Math.floor(before) + LEASE_S * 1000 - slack);
    expect(Number(claimed!.lease_expires_at)).toBeLessThanOrEqual(Math.ceil(after) + LEASE_S * 1000 + slack);
  });
});

describeMultiProcess('processes with skewed clocks on one PostgreSQL database', () => {
  /** Another process on this database whose own clock is `skewMs` off. */
  const stores: StoreAdapter[] = [];
  const engines: Engine[] = [];
  let fast: Engine;
  let slow: Engine;
  const processWithClock = async (skewMs: number, nodeId: string) => {
    const store = openPostgres({ url: PG_URL, schema: ts.location.schema, poolMax: 2, processClock: () => Date.now() + skewMs });
    stores.push(store);
    await store.migrate(); // as `baton up`: nothing to apply, and the clock is measured
    const e = new Engine({ store, nodeId });
    engines.push(e);
    return e;
  };

  beforeAll(async () => {
    fast = await processWithClock(SKEW_MS, 'fast-clock');
    slow = await processWithClock(-SKEW_MS, 'slow-clock');
  });
  afterAll(async () => {
    for (const e of engines) e.close();
    for (const s of stores) await s.close();
  });

  const newAgent = agentMaker(() => engine, 'skew', {
    max_parallel: 2,
    lease_ttl_seconds: LEASE_S,
    timeout_seconds: TIMEOUT_S,
    breaker: null,
  });
  const reapedOf = async (e: Engine, agent: string) => (await e.reapOnce()).filter((r) => r.agent === agent);

  it('measures each process clock against the database, and /metrics says it', async () => {
    expect(stores[0]!.clockSkew().offsetMs).toBeLessThan(-SKEW_MS / 2);
    expect(stores[1]!.clockSkew().offsetMs).toBeGreaterThan(SKEW_MS / 2);
    const metrics = createNodeMetrics(fast);
    try {
      const { body } = await metrics.render();
      const offset = Number(/^baton_clock_offset_seconds (\S+)$/m.exec(body)?.[1]);
      expect(offset).toBeLessThan(-SKEW_MS / 2000);
    } finally {
      metrics.close();
    }
  });

  it('measures again at once when the process clock jumps against the wall clock (a step, a suspended machine)', async () => {
    let jump = 0;
    const store = openPostgres({ url: PG_URL, schema: ts.location.schema, poolMax: 1, processClock: () => Date.now() + jump });
    stores.push(store);
    await store.migrate();
    const off = async () => Math.abs(store.now() - (await storeClock(ts.store)));
    expect(await off()).toBeLessThan(5_000);
    jump = 90_000;
    // The first reading after the jump is off by it and starts a measurement; the next minute's is far away.
    for (const until = Date.now() + 20_000; (await off()) > 5_000;) {
      if (Date.now() > until) throw new Error('the jump was not measured');
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(store.clockSkew().offsetMs).toBeLessThan(-80_000);
  });

  it("stamps a fast process's rows by the database's clock", async () => {
    const agent = await newAgent();
    const before = await storeClock(ts.store);
    const { id } = await fast.submit(agent, { message: 'm' }, 'test');
    const after = await storeClock(ts.store);
    const created = Number((await engine.getExecution(id)).execution.created_at);
    // Off by at most the measurement's error (half a round trip), far inside a second.
    expect(created).toBeGreaterThan(before - 1_000);
    expect(created).toBeLessThan(after + 1_000);
  });

  it('a process two minutes fast reaps no live lease and times out no run early', async () => {
    const agent = await newAgent();
    const { id } = await engine.submit(agent, { message: 'm' }, 'test');
    const [row] = await engine.claim(agent, { owner: 'true-worker' });
    expect(row!.id).toBe(id);
    // The lease (30 s) and the timeout (60 s) both end before the fast clock's reading.
    expect(await reapedOf(fast, agent)).toEqual([]);
    const after = await engine.getExecution(id);
    expect(after.execution).toMatchObject({ status: 'running', lease_owner: 'true-worker', attempt: 1 });
    expect(after.execution.lease_token).toBe(row!.lease_token);
  });

  it('a lease taken through a slow clock is live for every process', async () => {
    const agent = await newAgent();
    const { id } = await engine.submit(agent, { message: 'm' }, 'test');
    const [row] = await slow.claim(agent, { owner: 'slow-worker' });
    expect(row!.id).toBe(id);
    expect(Number(row!.lease_expires_at)).toBeGreaterThan((await storeClock(ts.store)) + LEASE_S * 1000 - 10_000);
    expect(await reapedOf(engine, agent)).toEqual([]);
    expect(await reapedOf(fast, agent)).toEqual([]);
    expect((await engine.getExecution(id)).execution).toMatchObject({ status: 'running', lease_owner: 'slow-worker' });
  });

  it('a lapsed lease is reaped by the skewed processes as by any other', async () => {
    const agent = await newAgent();
    const { id } = await engine.submit(agent, { message: 'm' }, 'test');
    await engine.claim(agent, { owner: 'gone-worker' });
    // A lease that lapsed a second ago by the database's clock: the slow process reaps it too.
    await ts.store.db
      .updateTable('executions')
      .set({ lease_expires_at: Math.floor(await storeClock(ts.store)) - 1_000 })
      .where('id', '=', id)
      .execute();
    expect((await reapedOf(slow, agent)).map((r) => [r.id, r.kind])).toEqual([[id, 'requeued']]);
  });

  it('a process two minutes fast fires no schedule before its time', async () => {
    const agent = await newAgent();
    // Due in about a minute by the database's clock: before the fast clock's reading, long after this test.
    const due = new Date(Math.ceil((await storeClock(ts.store)) / 1000) * 1000 + 60_000);
    const cron = `${due.getUTCSeconds()} ${due.getUTCMinutes()} ${due.getUTCHours()} * * *`;
    const s = await fast.schedules.create(agent, { name: 'in-a-minute', cron, message: 'tick' }, 'test');
    expect(Number(s.next_run_at)).toBe(due.getTime());
    await tickSchedulesOnce(fast);
    await tickSchedulesOnce(slow);
    const fired = await ts.store.db.selectFrom('executions').select('id').where('schedule_id', '=', s.id).execute();
    expect(fired).toEqual([]);
  });
});
