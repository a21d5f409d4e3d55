/**
 * A claim's look at an agent with nothing queued. A worker's long-poll claim looks once as it
 * arrives, and a worker completing a task asks for the next with it: with one producer feeding
 * many agents, most such looks find the agent's queue empty. On SQLite the admission's agent read
 * carries the agent's queued count (its backlog counters), so an empty queue is not walked: the
 * look is that one statement. A queue holding only a delayed task is walked as before, and a
 * waiting claim then learns there is queued work (a freed seat may still give it nothing, but the
 * task coming due does). Statements counted as the engine sends them (test/helpers/counting-store.ts).
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
const sqlite = STORE_KIND === 'sqlite';

const newAgent = agentMaker(() => engine, 'empty-look', { max_parallel: 3, max_backlog: 100, breaker: null });

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: countingStore(ts.store, sent), clock, nodeId: 'empty-look', claimPollMs: 600_000 });
});
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

describe(`a claim's look at an empty queue (${STORE_KIND})`, () => {
  it('reads the agent and walks no queue: one statement on SQLite, a waiting claim’s look included', async () => {
    const agent = await newAgent();
    const made = await engine.submit(agent, { message: 'one' }, 'test');
    // The first claim stamps last_claim_at; the looks below are within its interval and write nothing.
    const [got] = await engine.claim(agent, { owner: 'w', max: 3 });
    expect(got?.id).toBe(made.id);
    const look = await counted(sent, () => engine.claim(agent, { owner: 'w', max: 3 }));
    expect(look.out).toEqual([]);
    const waiting = await counted(sent, () => engine.claim(agent, { owner: 'w', max: 3, waitMs: 30 }));
    expect(waiting.out).toEqual([]);
    // One statement a look (on SQLite the agent read; on PostgreSQL the store's claim call). The
    // waiting claim looks as it arrives, and once more as its wait ends unless the first look
    // outlasted the wait (a loaded machine): one or two looks.
    expect(look.statements).toBe(1);
    expect(waiting.statements).toBeGreaterThanOrEqual(1);
    expect(waiting.statements).toBeLessThanOrEqual(2);
  });

  it('walks the queue when a task is queued but not due, and takes it once it is', async () => {
    const agent = await newAgent();
    const later = await engine.submit(agent, { message: 'later', run_after: clock() + 60_000 } as never, 'test');
    await engine.claim(agent, { owner: 'w', max: 1 }); // the stamp
    const look = await counted(sent, () => engine.claim(agent, { owner: 'w', max: 3 }));
    expect(look.out).toEqual([]);
    if (sqlite) expect(look.statements).toBe(2); // the agent with its count, then the walk
    clock.advance(60_000);
    const [got] = await engine.claim(agent, { owner: 'w', max: 3 });
    expect(got?.id).toBe(later.id);
  });

  it('a task submitted after an empty look is claimed by the next look', async () => {
    const agent = await newAgent();
    expect(await engine.claim(agent, { owner: 'w', max: 3 })).toEqual([]);
    const made = await engine.submit(agent, { message: 'after' }, 'test');
    const waiting = engine.claim(agent, { owner: 'w', max: 3, waitMs: 20_000 });
    expect((await waiting).map((r) => r.id)).toEqual([made.id]);
  });
});
