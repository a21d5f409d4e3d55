/**
 * A gathered admission on PostgreSQL (src/engine/admissions.ts) reads each pool its agents draw
 * from once, after every agent's lock (FastPaths.lockAdmissions: baton_lock_agents), not once per
 * agent: the engine carries a pool from one admission to the next (admission-carry.ts), so every
 * read after the first was work for nothing, each a lock of the pool's row again and the sum of its
 * seats over every member. And an agent whose look finds nothing queued is told so by that call,
 * not by a statement of its own inside the transaction. The pool reads are counted in the
 * database: baton_lock_pools is wrapped, in this file's own schema, by a function that counts its
 * calls on a sequence. On SQLite the answers are checked alike.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { agentMaker } from '../helpers/agents.ts';
import { manualClock } from '../helpers/clock.ts';
import { counted, countingStore, noneSent } from '../helpers/counting-store.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
const sent = noneSent();
const pg = STORE_KIND === 'postgres';

const newAgent = agentMaker(() => engine, 'pools-once', { max_parallel: 5, max_backlog: 100, breaker: null });

/** Calls of baton_lock_pools so far (PostgreSQL). */
const poolReads = async () => Number((await sql<{ n: string }>`SELECT last_value AS n FROM pool_reads`.execute(ts.store.db)).rows[0]!.n);

beforeAll(async () => {
  ts = await openTestStore();
  if (pg) {
    // Before any call plans a call of it: a plan made before would still call the function renamed.
    await sql`CREATE SEQUENCE pool_reads MINVALUE 0 START 0`.execute(ts.store.db);
    await sql`ALTER FUNCTION baton_lock_pools(text[]) RENAME TO baton_lock_pools_counted`.execute(ts.store.db);
    await sql`CREATE FUNCTION baton_lock_pools(p_names text[])
      RETURNS TABLE (pool text, max_parallel integer, throttle text, throttle_tat bigint, agent text, since bigint, seen_at bigint)
      LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM nextval('pool_reads');
        RETURN QUERY SELECT * FROM baton_lock_pools_counted(p_names);
      END $$`.execute(ts.store.db);
  }
  engine = new Engine({ store: countingStore(ts.store, sent), clock, nodeId: 'pools-once', claimPollMs: 600_000 });
  clock.set(Date.UTC(2026, 0, 10, 12, 0, 5));
});
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

describe(`a gathered admission's pools (${STORE_KIND})`, () => {
  it('reads a pool once for all the agents of one transaction, its seats exact for each', async () => {
    await engine.pools.create({ name: 'once-pool', max_parallel: 6 }, 'test');
    const agents = [
      await newAgent({ pools: ['once-pool'] }),
      await newAgent({ pools: ['once-pool'] }),
      await newAgent({ pools: ['once-pool'] }),
    ];
    for (const agent of agents)
      for (let i = 0; i < 3; i++) {
        clock.advance(1);
        await engine.submit(agent, { message: `${agent}-${i}` }, 'test');
      }
    const claim = (agent: string) => engine.claim(agent, { owner: 'w', max: 1 });
    // First, each alone: the claim call says it cannot decide (a pool), and each agent's lane is
    // then its pool's.
    for (const agent of agents) expect(await claim(agent)).toHaveLength(1);
    const before = pg ? await poolReads() : 0;
    // Three agents' claims in one transaction: three seats left, one for each; the pool is then full.
    const together = await counted(sent, () => Promise.all(agents.map((a) => claim(a))));
    expect(together.out.map((r) => r.map((x) => x.message))).toEqual(agents.map((a) => [`${a}-1`]));
    if (pg) {
      expect(together.statements).toBe(2); // the call that locks and reads, the writes
      expect((await poolReads()) - before).toBe(1);
    }
    // The pool is full: a fourth claim takes nothing.
    expect(await claim(agents[0]!)).toEqual([]);
  });

  it("a waiting claim's look at an empty queue asks no more than the lock's call whether anything is queued", async () => {
    await engine.pools.create({ name: 'once-empty', max_parallel: 4 }, 'test');
    const agent = await newAgent({ pools: ['once-empty'] });
    await engine.submit(agent, { message: 'one' }, 'test');
    expect(await engine.claim(agent, { owner: 'w', max: 1 })).toHaveLength(1);
    const before = pg ? await poolReads() : 0;
    const look = await counted(sent, () => engine.claim(agent, { owner: 'w', max: 3, waitMs: 30 }));
    expect(look.out).toEqual([]);
    if (pg) {
      // Each look: the call, and the writes (its wait in the pool ended). It looks as it arrives,
      // and once more as its wait ends unless the first look outlasted the wait: one or two looks.
      expect([2, 4]).toContain(look.statements);
      expect((await poolReads()) - before).toBe(0); // no candidate: no pool locked
    }
    // Work queued after the look is taken by the next.
    const made = await engine.submit(agent, { message: 'after' }, 'test');
    expect((await engine.claim(agent, { owner: 'w', max: 3 })).map((r) => r.id)).toEqual([made.id]);
  });
});
