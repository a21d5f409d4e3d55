/**
 * Turns among a pool's agents (src/domain/pool-turns.ts), deterministic on the manual clock, on
 * both stores: a seat freed by an agent that completes and claims at once goes to the other
 * member whose claim waits for one; `waiting` names whose turn it is; a wait lapses when its
 * member stops looking, and ends when the member is held, so no one is kept from a free seat.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { POOL_TURN_TTL_MS } from '../../src/domain/pool-turns.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
/** A second engine on the same store, as another process's: it never admitted agent 1, so a seat agent 1 frees does not wake its claims. */
let other: Engine;
const clock = manualClock();
let n = 0;

beforeAll(async () => {
  ts = await openTestStore();
  // Polls rarely: a claim that wakes must have been woken, not have looked again on its own.
  const opts = { store: ts.store, clock, backlogExpiryMs: 30 * 24 * 3_600_000, claimPollMs: 600_000 };
  engine = new Engine({ ...opts, nodeId: 'turns-test' });
  other = new Engine({ ...opts, nodeId: 'turns-other' });
});
afterAll(async () => {
  engine.close();
  other.close();
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
const claim = (agent: string, max = 1) => engine.claim(agent, { owner: 'w1', max });
const complete = (r: ExecutionRow) => engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'test');
const waiting = async (id: string) => (await engine.getExecution(id)).waiting!;
const waitsOf = (pool: string) =>
  ts.store.db.selectFrom('pool_waits').select(['agent', 'since']).where('pool', '=', pool).orderBy('agent').execute();

/** A one-seat pool, agent 1 (`a`) holding its seat with a backlog behind, agent 2 (`b`) with one task. */
async function twoAgents() {
  const pool = name('turns');
  await engine.pools.create({ name: pool, max_parallel: 1 }, 'test');
  const a = name('ta');
  const b = name('tb');
  await engine.agents.create({ name: a, max_parallel: 4, pools: [pool] }, 'test');
  await engine.agents.create({ name: b, max_parallel: 4, pools: [pool] }, 'test');
  await submit(a, 3);
  const [held] = await claim(a);
  const [task] = await submit(b);
  return { pool, a, b, held: held!, task: task! };
}

describe(`turns among a pool's agents (${STORE_KIND})`, () => {
  it("a seat freed by an agent that completes and claims goes to the other agent's parked claim", async () => {
    const { pool, a, b, held, task } = await twoAgents();
    const parked = other.claim(b, { owner: 'w2', max: 1, waitMs: 60_000 });
    // Its first look was refused for the seat: it waits for a turn.
    while ((await waitsOf(pool)).length === 0) await new Promise((r) => setTimeout(r, 5));
    expect((await waitsOf(pool)).map((w) => w.agent)).toEqual([b]);

    await complete(held);
    // Agent 1 completes and claims at once, before agent 2's claim looks: the seat is agent 2's turn.
    expect(await claim(a)).toEqual([]);
    const got = await parked;
    expect(got.map((r) => r.id)).toEqual([task.id]);
    // Agent 2 took its turn; agent 1 now waits for the next seat.
    expect((await waitsOf(pool)).map((w) => w.agent)).toEqual([a]);
    await complete(got[0]!);
    expect(await claim(a)).toHaveLength(1);
    expect(await waitsOf(pool)).toEqual([]);
  });

  it("waiting names the pool and whose turn it is; the turn's agent takes the seat, then turns go round", async () => {
    const { pool, a, b, held, task } = await twoAgents();
    expect(await claim(b)).toEqual([]); // refused for the seat: waits for a turn
    await complete(held);
    const queuedA = (await submit(a))[0]!;
    const w = await waiting(queuedA.id);
    expect(w.reason).toBe('pool_turn');
    expect(w.pool).toMatchObject({ name: pool, max_parallel: 1, in_use: 0, turn: { agent: b, waiting: 1 } });
    expect(w.summary).toContain(pool);
    expect(w.summary).toContain(b);
    expect(await claim(a)).toEqual([]);
    const [got] = await claim(b);
    expect(got!.id).toBe(task.id);
    // Round robin: b has more work, but a has waited since b took its seat.
    const [b2] = await submit(b);
    expect(await claim(b)).toEqual([]);
    await complete(got!);
    expect(await claim(b)).toEqual([]);
    expect(await claim(a)).toHaveLength(1);
    expect((await waiting(b2!.id)).reason).toBe('pool_full');
  });

  it('a wait lapses when its agent stops looking, and ends when the agent is held: no free seat is kept from the others', async () => {
    const { a, b, held } = await twoAgents();
    expect(await claim(b)).toEqual([]);
    await complete(held);
    expect(await claim(a)).toEqual([]);
    // No claim of b looked for longer than a wait lasts: a may take the seat.
    clock.advance(POOL_TURN_TTL_MS);
    const [again] = await claim(a);
    expect(again).toBeDefined();

    // b waits again, then is paused: its next look ends its wait at once.
    expect(await claim(b)).toEqual([]);
    await complete(again!);
    expect(await claim(a)).toEqual([]);
    await engine.agents.pause(b, 'test', 'test');
    expect(await claim(b)).toEqual([]);
    expect(await claim(a)).toHaveLength(1);
  });
});
