import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyedCandidates, walkRows } from '../../src/engine/candidates.ts';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

// A keyed claim's candidates when shut keys lead the queue (src/engine/candidates.ts): whether it
// finds them in the prefix it walks or merges the heads of the other keys and of the tasks without
// a key, they are the rows a walk of the whole queue would find — the first `limit` queued rows
// that may start, outside the shut keys, in admission order (priority, fair_round, queued_at, id).
// Random queues behind a shut key's backlog deeper than the prefix, on both stores.

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let run = 0;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'candidates-test', backlogExpiryMs: 30 * 86_400_000 });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

interface Task {
  /** Index into KEYS, or KEYS.length for no key. */
  key: number;
  priority: number;
  /** Not due yet (run_after an hour ahead). */
  later: boolean;
}
const KEYS = Array.from({ length: 40 }, (_, i) => `k${String(i).padStart(2, '0')}`);
const taskArb: fc.Arbitrary<Task> = fc.record({
  // A few keys often, no key often, any of 40 keys now and then.
  key: fc.oneof(fc.integer({ min: 0, max: 3 }), fc.constant(KEYS.length), fc.integer({ min: 0, max: KEYS.length })),
  priority: fc.integer({ min: -1, max: 2 }),
  later: fc.boolean(),
});
const caseArb = fc.record({
  /** The shut key's backlog: before the other tasks, after them, or both. */
  deepFirst: fc.integer({ min: 0, max: 150 }),
  deepAfter: fc.integer({ min: 0, max: 60 }),
  deepPriority: fc.integer({ min: -1, max: 1 }),
  tasks: fc.array(taskArb, { maxLength: 40 }),
  /** Keys shut beside the deep one. */
  shut: fc.subarray(KEYS.slice(0, 6)),
  limit: fc.integer({ min: 1, max: 12 }),
});

interface Row {
  id: string;
  flow_key: string | null;
  priority: number;
  fair_round: number;
  queued_at: number;
  run_after: number | null;
}
const order = (x: Row, y: Row) =>
  x.priority - y.priority || x.fair_round - y.fair_round || x.queued_at - y.queued_at || (x.id < y.id ? -1 : x.id > y.id ? 1 : 0);

describe(`a keyed claim's candidates behind shut keys (${STORE_KIND})`, () => {
  it('are the first rows a walk of the whole queue finds, from the prefix or from the key heads', async () => {
    let fromHeads = 0;
    await fc.assert(
      fc.asyncProperty(caseArb, async (c) => {
        const agent = `cand-${++run}`;
        await engine.agents.create({ name: agent, max_parallel: 50, max_backlog: 10_000, key_max_parallel: 1 }, 'test');
        const deep = (n: number) =>
          n > 0 &&
          engine.submitMany(
            agent,
            Array.from({ length: n }, (_, i) => ({ message: `deep ${i}`, key: 'deep', priority: c.deepPriority })),
            'test',
          );
        await deep(c.deepFirst);
        for (const t of c.tasks) {
          clock.advance(1);
          const key = t.key < KEYS.length ? KEYS[t.key] : undefined;
          const later = t.later ? { run_after: clock() + 3_600_000 } : {};
          await engine.submit(agent, { message: 't', priority: t.priority, ...(key ? { key } : {}), ...later }, 'test');
        }
        await deep(c.deepAfter);
        const shut = ['deep', ...c.shut];
        const now = clock();
        const rows = (await ts.store.db
          .selectFrom('executions')
          .select(['id', 'flow_key', 'priority', 'fair_round', 'queued_at', 'run_after'])
          .where('agent', '=', agent)
          .where('status', '=', 'queued')
          .execute()) as Row[];
        const due = rows
          .map((r) => ({ ...r, priority: Number(r.priority), fair_round: Number(r.fair_round), queued_at: Number(r.queued_at) }))
          .filter((r) => r.run_after === null || Number(r.run_after) <= now)
          .sort(order);
        const open = (r: Row) => r.flow_key === null || !shut.includes(r.flow_key);
        const expected = due.filter(open).slice(0, c.limit);
        const got = await ts.store.transaction((tx) => keyedCandidates(ts.store, tx, { agent, now }, c.limit, shut));
        expect(got.map((r) => r.id)).toEqual(expected.map((r) => r.id));
        // The walked prefix is full and short of candidates: they came from the heads.
        const prefix = due.slice(0, walkRows(c.limit));
        if (prefix.length === walkRows(c.limit) && prefix.filter(open).length < c.limit) fromHeads++;
      }),
      { numRuns: 60, seed: process.env.BATON_MODEL_SEED ? Number(process.env.BATON_MODEL_SEED) : undefined },
    );
    // Both ways were taken, the heads often.
    expect(fromHeads).toBeGreaterThan(10);
  }, 240_000);

  it('merges more key heads than one statement reads, in admission order', async () => {
    const agent = `cand-${++run}`;
    await engine.agents.create({ name: agent, max_parallel: 50, max_backlog: 10_000, key_max_parallel: 1 }, 'test');
    await engine.submitMany(
      agent,
      Array.from({ length: 200 }, (_, i) => ({ message: `deep ${i}`, key: 'deep' })),
      'test',
    );
    // Behind the backlog (a lower priority), one task on each of 40 keys, the last key first.
    const ids: string[] = [];
    for (const key of [...KEYS].reverse()) {
      clock.advance(1);
      ids.push((await engine.submit(agent, { message: key, key, priority: 1 }, 'test')).id);
    }
    const now = clock();
    const got = await ts.store.transaction((tx) => keyedCandidates(ts.store, tx, { agent, now }, 12, ['deep']));
    expect(got.map((r) => r.id)).toEqual(ids.slice(0, 12));
  });

  it('a claim takes a task of another key from behind a shut key’s whole backlog', async () => {
    const agent = `cand-${++run}`;
    await engine.agents.create({ name: agent, max_parallel: 5, max_backlog: 10_000, key_max_parallel: 1 }, 'test');
    await engine.submitMany(
      agent,
      Array.from({ length: 300 }, (_, i) => ({ message: `deep ${i}`, key: 'deep' })),
      'test',
    );
    const [held] = await engine.claim(agent, { owner: 'w', max: 1 });
    expect(held!.flow_key).toBe('deep');
    clock.advance(1);
    const behind = await engine.submit(agent, { message: 'behind', key: 'other', priority: 1 }, 'test');
    const plain = await engine.submit(agent, { message: 'plain', priority: 2 }, 'test');
    const got = await engine.claim(agent, { owner: 'w', max: 5 });
    expect(got.map((r) => r.id)).toEqual([behind.id, plain.id]);
    expect(await engine.claim(agent, { owner: 'w', max: 5 })).toEqual([]);
  });
});
