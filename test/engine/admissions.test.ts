/**
 * Admissions made several agents to a transaction (src/engine/admissions.ts, where the store has
 * fast paths): the lock order they keep, and that pools' seats stay exact when the agents that
 * share them are admitted in one transaction, with a failing one made alone.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admitMany, poolOrder } from '../../src/engine/admissions.ts';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

describe('poolOrder', () => {
  it('orders agents by their pools and says whether that locks each new pool after all before it', () => {
    expect(
      poolOrder([
        { name: 'b', pools: ['p2'] },
        { name: 'a', pools: ['p1'] },
        { name: 'c', pools: [] },
        { name: 'd', pools: ['p1', 'p2'] },
      ]),
    ).toEqual({ order: ['c', 'a', 'd', 'b'], inOrder: true });
    // x locks p1 then p3; y's p2 would come after p3.
    expect(
      poolOrder([
        { name: 'x', pools: ['p1', 'p3'] },
        { name: 'y', pools: ['p2'] },
      ]),
    ).toEqual({ order: ['x', 'y'], inOrder: false });
  });
});

describe(`admissions gathered into one transaction (${STORE_KIND})`, () => {
  let ts: TestStore;
  let engine: Engine;
  const clock = manualClock();
  beforeAll(async () => {
    ts = await openTestStore();
    engine = new Engine({ store: ts.store, clock, nodeId: 'admissions-test', claimPollMs: 600_000 });
    clock.set(Date.UTC(2026, 0, 10, 12, 0, 5));
  });
  afterAll(async () => {
    engine.close();
    await ts.cleanup();
  });

  it("keeps every pool's seats exact across agents admitted together, pools locked out of their agents' order", async () => {
    await engine.pools.create({ name: 'ad-p1', max_parallel: 3 }, 'test');
    await engine.pools.create({ name: 'ad-p2', max_parallel: 2 }, 'test');
    await engine.pools.create({ name: 'ad-p3', max_parallel: 10 }, 'test');
    const members: Record<string, string[]> = {
      'ad-x': ['ad-p1', 'ad-p3'],
      'ad-y': ['ad-p2'],
      'ad-z': ['ad-p1'],
      'ad-v': ['ad-p2', 'ad-p3'],
      'ad-k': [],
    };
    for (const [agent, pools] of Object.entries(members)) {
      await engine.agents.create({ name: agent, max_parallel: 5, pools, key_max_parallel: 1 }, 'test');
      for (let i = 0; i < 5; i++) {
        clock.advance(1);
        await engine.submit(agent, { message: `t${i}`, key: `k${i % 2}` }, 'key:test');
      }
    }
    // One transaction of all five, as a lane makes it: x locks p1 and p3, then y's p2 comes after
    // p3, so the pools are locked up front.
    const agents = Object.keys(members);
    const opts = { now: clock(), owner: 'w', max: 10, delivery: 'pull' as const };
    const taken = await ts.store.transaction((tx) =>
      admitMany(
        tx,
        ts.store,
        agents.map((id) => ({ id, opts })),
      ),
    );
    const got = Object.fromEntries(agents.map((a) => [a, taken.get(a)!.length]));
    // Each agent's key cap: one running task per key, two keys.
    for (const a of agents) expect(got[a]).toBeLessThanOrEqual(2);
    expect(got['ad-x']! + got['ad-z']!).toBe(3);
    expect(got['ad-y']! + got['ad-v']!).toBe(2);
    expect(got['ad-k']).toBe(2);
    const running = await ts.store.db
      .selectFrom('executions')
      .select(['agent'])
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('status', '=', 'running')
      .where('agent', 'like', 'ad-%')
      .groupBy('agent')
      .execute();
    const n = Object.fromEntries(running.map((r) => [r.agent, Number(r.n)]));
    expect((n['ad-x'] ?? 0) + (n['ad-z'] ?? 0)).toBe(3);
    expect((n['ad-y'] ?? 0) + (n['ad-v'] ?? 0)).toBe(2);
  });

  it("carries each pool's throttle and waits, and the serial keys taken, from one agent's admission to the next", async () => {
    // A pool throttle with a burst of 2: three starts at once in all, whoever takes them.
    await engine.pools.create({ name: 'ad-t', throttle: { limit: 1, period_seconds: 60, burst: 2 } }, 'test');
    // One seat: the first agent takes it, the others wait in turn, each behind the one before.
    await engine.pools.create({ name: 'ad-w', max_parallel: 1 }, 'test');
    const throttled = ['ad-t1', 'ad-t2', 'ad-t3'];
    const seated = ['ad-w1', 'ad-w2', 'ad-w3'];
    const serial = ['ad-s1', 'ad-s2'];
    for (const agent of [...throttled, ...seated, ...serial]) {
      const pools = throttled.includes(agent) ? ['ad-t'] : seated.includes(agent) ? ['ad-w'] : [];
      await engine.agents.create({ name: agent, max_parallel: 5, pools }, 'test');
      for (let i = 0; i < 2; i++) {
        clock.advance(1);
        await engine.submit(agent, { message: `t${i}` }, 'key:test');
      }
    }
    // Both serial agents' first rows share a serial key (a schedule's runs, say, moved from one
    // agent to the other): one of them may run at a time.
    for (const agent of serial) {
      const first = await ts.store.db
        .selectFrom('executions')
        .select('id')
        .where('agent', '=', agent)
        .orderBy('queued_at')
        .executeTakeFirstOrThrow();
      await ts.store.db.updateTable('executions').set({ serial_key: 'ad-serial' }).where('id', '=', first.id).execute();
    }
    const agents = [...throttled, ...seated, ...serial];
    const opts = { now: clock(), owner: 'w', max: 10, delivery: 'pull' as const };
    const taken = await ts.store.transaction((tx) =>
      admitMany(
        tx,
        ts.store,
        agents.map((id) => ({ id, opts })),
      ),
    );
    const got = (names: string[]) => names.reduce((n, a) => n + taken.get(a)!.length, 0);
    expect(got(throttled)).toBe(3);
    expect(got(seated)).toBe(1);
    const waits = await ts.store.db
      .selectFrom('pool_waits')
      .select(['agent', 'since'])
      .where('pool', '=', 'ad-w')
      .orderBy('since')
      .execute();
    expect(waits.map((w) => w.agent)).toEqual(['ad-w2', 'ad-w3']);
    expect(Number(waits[1]!.since)).toBeGreaterThan(Number(waits[0]!.since));
    const runs = [...taken.get('ad-s1')!, ...taken.get('ad-s2')!];
    expect(runs.filter((r) => r.serial_key === 'ad-serial')).toHaveLength(1);
    expect(runs).toHaveLength(3);
  });

  it('a claim that fails fails alone: the others claimed with it are admitted', async () => {
    await engine.pools.create({ name: 'ad-q', max_parallel: 4 }, 'test');
    for (const agent of ['ad-e1', 'ad-e2', 'ad-e3']) {
      await engine.agents.create({ name: agent, max_parallel: 2, pools: ['ad-q'] }, 'test');
      clock.advance(1);
      await engine.submit(agent, { message: 'one' }, 'key:test');
    }
    const out = await Promise.allSettled([
      engine.claim('ad-e1', { owner: 'w', max: 1 }),
      engine.claim('ad-e2', { owner: 'w', max: 1, delivery: 'push' }),
      engine.claim('ad-e3', { owner: 'w', max: 1 }),
    ]);
    expect(out[0]).toMatchObject({ status: 'fulfilled', value: [{ agent: 'ad-e1' }] });
    expect(out[1]).toMatchObject({ status: 'rejected', reason: { code: 'wrong_delivery' } });
    expect(out[2]).toMatchObject({ status: 'fulfilled', value: [{ agent: 'ad-e3' }] });
  });
});
