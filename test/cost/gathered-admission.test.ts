/**
 * A claim that the store's claim call cannot decide (keys, pools) goes to a gathered admission
 * transaction (src/engine/admissions.ts). On PostgreSQL that transaction is two statements
 * whatever the number of agents: one call that locks the agents in name order, reads them, and then
 * locks and reads their pools (baton_lock_agents), and one that writes. An agent moved to another
 * pool gets the limits of its new pool (the call reads its pools from its locked row). Counted on
 * the statements the engine sends (a recording Kysely plugin; BEGIN and COMMIT not included); on
 * SQLite the answers are checked alike.
 */
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

const newAgent = agentMaker(() => engine, 'gathered', { max_parallel: 5, max_backlog: 100 });
const pg = STORE_KIND === 'postgres';

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: countingStore(ts.store, sent), clock, nodeId: 'gathered-admission', claimPollMs: 600_000 });
  clock.set(Date.UTC(2026, 0, 10, 12, 0, 5));
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

describe(`a gathered admission's statements (${STORE_KIND})`, () => {
  it('two once the pools are known, for one agent or several; an agent moved to another pool gets its limits', async () => {
    await engine.pools.create({ name: 'ga-full', max_parallel: 1 }, 'test');
    await engine.pools.create({ name: 'ga-room', max_parallel: 10 }, 'test');
    const a = await newAgent({ pools: ['ga-full'] });
    const [b, c] = [await newAgent({ pools: ['ga-room'] }), await newAgent({ pools: ['ga-room'] })];
    for (const agent of [a, b, c])
      for (let i = 0; i < 4; i++) {
        clock.advance(1);
        await engine.submit(agent, { message: `${agent}-${i}` }, 'test');
      }
    const claim = (agent: string) => engine.claim(agent, { owner: 'w', max: 1 });
    // First: the claim call says it cannot decide (pools), and the transaction reads the agents' pools.
    expect((await Promise.all([claim(a), claim(b), claim(c)])).map((r) => r.length)).toEqual([1, 1, 1]);
    // Then, the pools known: the lock with every read, and the writes.
    const alone = await counted(sent, () => claim(b));
    expect(alone.out.map((r) => r.message)).toEqual([`${b}-1`]);
    if (pg) expect(alone.statements).toBe(2);
    const together = await counted(sent, () => Promise.all([claim(b), claim(c)]));
    expect(together.out.map((r) => r.map((x) => x.message))).toEqual([[`${b}-2`], [`${c}-1`]]);
    if (pg) expect(together.statements).toBe(2);
    // b moves to the pool whose one seat a holds: its claim, though this process knew its old
    // pool, takes nothing; moved back, it takes one again, and then in two statements.
    await engine.agents.update(b, { pools: ['ga-full'] }, 'test');
    expect(await claim(b)).toEqual([]);
    await engine.agents.update(b, { pools: ['ga-room'] }, 'test');
    expect((await claim(b)).map((r) => r.message)).toEqual([`${b}-3`]);
    clock.advance(1);
    await engine.submit(b, { message: `${b}-4` }, 'test');
    const again = await counted(sent, () => claim(b));
    expect(again.out.map((r) => r.message)).toEqual([`${b}-4`]);
    if (pg) expect(again.statements).toBe(2);
  });
});
