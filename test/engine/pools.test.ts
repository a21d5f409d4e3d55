/**
 * Pools and throttles in admission: deterministic, on the manual clock, on both stores. A pool's
 * seats are shared by its agents; throttles (on an agent, on a pool) space starts; a pool's budget
 * per minute holds its agents until the window rolls; a parked claim wakes when a throttle opens.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { BatonError } from '../../src/domain/errors.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let n = 0;
const MINUTE = 60_000;

beforeAll(async () => {
  ts = await openTestStore();
  // Polls rarely: a claim that wakes must have been woken, not have looked again on its own.
  engine = new Engine({ store: ts.store, clock, nodeId: 'pools-test', backlogExpiryMs: 30 * 24 * 3_600_000, claimPollMs: 600_000 });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});
beforeEach(() => clock.set(Date.UTC(2026, 0, 10, 12, 0, 5)));

const name = (p: string) => `${p}-${++n}`;
const submit = async (agent: string, k = 1) => {
  const rows: ExecutionRow[] = [];
  for (let i = 0; i < k; i++) {
    clock.advance(1);
    rows.push(await engine.submit(agent, { message: `task ${i}` }, 'key:test'));
  }
  return rows;
};
const claim = (agent: string, max = 10) => engine.claim(agent, { owner: 'w1', max });
const waiting = async (id: string) => (await engine.getExecution(id)).waiting!;
const facts = async (agent: string) =>
  ts.store.db.selectFrom('agents').select(['fast_claim', 'fast_complete']).where('name', '=', agent).executeTakeFirstOrThrow();

describe(`pools and throttles (${STORE_KIND})`, () => {
  it("a pool's seats are shared by its agents, and waiting names the pool, its cap and its holders", async () => {
    const pool = name('seats');
    await engine.pools.create({ name: pool, max_parallel: 3 }, 'test');
    const a = name('pa');
    const b = name('pb');
    await engine.agents.create({ name: a, max_parallel: 5, pools: [pool] }, 'test');
    await engine.agents.create({ name: b, max_parallel: 5, pools: [pool] }, 'test');
    // Limits make the TypeScript admission decide: no fast claim.
    expect((await facts(a)).fast_claim).toBe(0);
    await submit(a, 2);
    await submit(b, 3);
    expect(await claim(a)).toHaveLength(2);
    const taken = await claim(b);
    expect(taken).toHaveLength(1); // 2 + 1 = the pool's 3 seats, though b has 5 of its own
    expect(await claim(b)).toHaveLength(0);
    const w = await waiting((await submit(b))[0]!.id);
    expect(w.reason).toBe('pool_full');
    expect(w.pool).toMatchObject({ name: pool, max_parallel: 3, in_use: 3 });
    expect(w.pool!.holders.map((h) => h.agent).sort()).toEqual([a, a, b]);
    expect(w.summary).toContain(pool);
    // A seat freed in the pool (by a's task) lets b admit one more.
    const ra = await ts.store.db
      .selectFrom('executions')
      .selectAll()
      .where('agent', '=', a)
      .where('status', '=', 'running')
      .executeTakeFirstOrThrow();
    await engine.complete(ra.id, ra.lease_token!, { status: 'succeeded' }, 'w1');
    expect(await claim(b)).toHaveLength(1);
    const usage = await engine.pools.get(pool);
    expect(usage.agents).toEqual([a, b].sort());
    expect(usage.in_use).toBe(3);
  });

  it("an agent's throttle spaces its starts, waiting says when it next admits, and the clock opens it", async () => {
    const a = name('ta');
    await engine.agents.create({ name: a, max_parallel: 10, throttle: { limit: 2, period_seconds: 60, burst: 1 } }, 'test');
    expect((await facts(a)).fast_claim).toBe(0);
    const rows = await submit(a, 5);
    // burst 1: two at once, then one per 30 s.
    expect(await claim(a)).toHaveLength(2);
    expect(await claim(a)).toHaveLength(0);
    const w = await waiting(rows[2]!.id);
    expect(w.reason).toBe('throttled');
    expect(w.throttle).toMatchObject({ limit: 2, period_seconds: 60, burst: 1 });
    expect(Date.parse(w.throttle!.next_admit_at)).toBe(clock() + 30_000);
    clock.advance(29_000);
    expect(await claim(a)).toHaveLength(0);
    clock.advance(1_000);
    expect(await claim(a)).toHaveLength(1);
    // Over any period: at most limit + burst starts.
    clock.advance(60_000);
    expect(await claim(a)).toHaveLength(2);
  });

  it("a pool's throttle is shared by its agents", async () => {
    const pool = name('pt');
    await engine.pools.create({ name: pool, throttle: { limit: 1, period_seconds: 10, burst: 0 } }, 'test');
    const a = name('pta');
    const b = name('ptb');
    await engine.agents.create({ name: a, max_parallel: 5, pools: [pool] }, 'test');
    await engine.agents.create({ name: b, max_parallel: 5, pools: [pool] }, 'test');
    await submit(a, 2);
    const [rb] = await submit(b, 2);
    expect(await claim(a)).toHaveLength(1);
    expect(await claim(b)).toHaveLength(0);
    const w = await waiting(rb!.id);
    expect(w.reason).toBe('pool_throttled');
    expect(w.pool!.name).toBe(pool);
    expect(w.pool!.throttle).toMatchObject({ limit: 1, period_seconds: 10 });
    clock.advance(10_000);
    expect(await claim(b)).toHaveLength(1);
    expect(await claim(a)).toHaveLength(0);
  });

  it("a pool's budget per minute holds every agent drawing from it until the window rolls", async () => {
    const pool = name('pbud');
    await engine.pools.create({ name: pool, budget: { limits: [{ metric: 'total_tokens', window: 'minute', limit: 1000 }] } }, 'test');
    const a = name('pba');
    const b = name('pbb');
    await engine.agents.create({ name: a, max_parallel: 5, pools: [pool] }, 'test');
    await engine.agents.create({ name: b, max_parallel: 5, pools: [pool] }, 'test');
    await submit(a, 1);
    const [rb] = await submit(b, 1);
    const [row] = await claim(a);
    await engine.complete(row!.id, row!.lease_token!, { status: 'succeeded', usage: { total_tokens: 1000 } }, 'w1');
    expect(await claim(b)).toHaveLength(0);
    const w = await waiting(rb!.id);
    expect(w.reason).toBe('pool_budget_spent');
    expect(w.pool!.name).toBe(pool);
    expect(w.budget).toMatchObject({ metric: 'total_tokens', window: 'minute', limit: 1000, spent: 1000 });
    expect(Date.parse(w.budget!.resets_at)).toBe(Date.UTC(2026, 0, 10, 12, 1));
    const usage = await engine.pools.get(pool);
    expect(usage.budget_limits[0]).toMatchObject({ spent: 1000, remaining: 0 });
    clock.set(Date.UTC(2026, 0, 10, 12, 1));
    expect(await claim(b)).toHaveLength(1);
  });

  it("an agent's own budget may count per minute", async () => {
    const a = name('am');
    await engine.agents.create(
      { name: a, max_parallel: 5, budget: { limits: [{ metric: 'total_tokens', window: 'minute', limit: 10 }] } },
      'test',
    );
    await submit(a, 2);
    const [row] = await claim(a, 1);
    await engine.complete(row!.id, row!.lease_token!, { status: 'succeeded', usage: { total_tokens: 10 } }, 'w1');
    expect(await claim(a)).toHaveLength(0);
    clock.advance(MINUTE);
    expect(await claim(a)).toHaveLength(1);
  });

  it('a parked claim wakes when the throttle opens (a timer at the reopening, not a poll)', async () => {
    const a = name('wake');
    await engine.agents.create({ name: a, max_parallel: 5, throttle: { limit: 1, period_seconds: 6, burst: 0 } }, 'test');
    await submit(a, 2);
    const t0 = clock();
    expect(await claim(a)).toHaveLength(1); // stamps last_claim_at = t0; the throttle reopens at t0 + 6 s
    clock.advance(5_000);
    // Parked: it polls only every 10 minutes and waits at most 50 s (longer than this test may
    // take), so only the timer at the reopening can admit in time.
    const parked = engine.claim(a, { owner: 'w2', max: 1, waitMs: 50_000 });
    // Its first look stamps the claim (5 s after the last stamp): it has seen the throttle closed.
    for (;;) {
      const { last_claim_at } = await ts.store.db
        .selectFrom('agents')
        .select('last_claim_at')
        .where('name', '=', a)
        .executeTakeFirstOrThrow();
      if (Number(last_claim_at) === t0 + 5_000) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    clock.advance(1_000);
    expect(await parked).toHaveLength(1);
  }, 30_000);

  it("a parked claim wakes when a seat of its pool frees, though another agent's task freed it", async () => {
    const pool = name('wakepool');
    await engine.pools.create({ name: pool, max_parallel: 1 }, 'test');
    const a = name('wpa');
    const b = name('wpb');
    await engine.agents.create({ name: a, max_parallel: 5, pools: [pool] }, 'test');
    await engine.agents.create({ name: b, max_parallel: 5, pools: [pool] }, 'test');
    await submit(a, 1);
    await submit(b, 1);
    const [held] = await claim(a);
    // Parked as above: only a wake can admit it in time.
    const parked = engine.claim(b, { owner: 'w2', max: 1, waitMs: 50_000 });
    for (;;) {
      const { last_claim_at } = await ts.store.db
        .selectFrom('agents')
        .select('last_claim_at')
        .where('name', '=', b)
        .executeTakeFirstOrThrow();
      if (last_claim_at !== null) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    await engine.complete(held!.id, held!.lease_token!, { status: 'succeeded' }, 'worker:test');
    expect(await parked).toHaveLength(1);
  }, 30_000);

  it('refuses: an unknown pool (naming pools), deleting a pool agents draw from (naming them)', async () => {
    const pool = name('del');
    await engine.pools.create({ name: pool, max_parallel: 1 }, 'test');
    const a = name('da');
    await expect(engine.agents.create({ name: a, pools: ['no-such-pool'] }, 'test')).rejects.toMatchObject({
      code: 'validation_error',
      message: expect.stringContaining('pools'),
    });
    await engine.agents.create({ name: a, pools: [pool] }, 'test');
    const err = await engine.pools.delete(pool, 'test').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BatonError);
    expect(err).toMatchObject({ code: 'pool_in_use', details: { agents: [a] } });
    await engine.agents.update(a, { pools: [] }, 'test');
    expect((await facts(a)).fast_claim).toBe(1);
    await engine.pools.delete(pool, 'test');
    await expect(engine.pools.get(pool)).rejects.toMatchObject({ code: 'not_found' });
  });
});
