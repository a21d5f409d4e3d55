/**
 * Which parked claims a freed seat wakes, on both stores. A claim whose look found its agent's
 * queue empty stays parked when a seat frees (only work queued can give it anything, and that
 * wakes it): admission says so on the transaction path and in PostgreSQL's claim call alike. One
 * whose look found queued work it could not take (seats full, a task not yet due) is woken. Admissions are counted by a spy on the engine's one admission function, which calls
 * through. The poll is off (claimPollMs of ten minutes): only signals wake the claims here.
 */
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
let n = 0;
const name = (p: string) => `${p}-${++n}`;

type Admit = (agent: string) => Promise<ExecutionRow[]>;
const spyAdmissions = (e: Engine): MockInstance<Admit> => vi.spyOn(e as unknown as { admitOnce: Admit }, 'admitOnce');

/** The admissions of `agent` the spy saw, and a promise that they have all ended. */
function admissionsOf(spy: MockInstance<Admit>, agent: string) {
  const mine = spy.mock.calls.flatMap((args, i) => (args[0] === agent ? [spy.mock.results[i]!] : []));
  return { count: mine.length, settled: Promise.allSettled(mine.map((r) => r.value)) };
}

async function untilAdmissions(spy: MockInstance<Admit>, agent: string, count: number): Promise<void> {
  await vi.waitFor(() => expect(admissionsOf(spy, agent).count).toBeGreaterThanOrEqual(count), { timeout: 20_000, interval: 5 });
  await admissionsOf(spy, agent).settled;
}

/** Submit one task to `agent` and lease it to a claim that does not wait. */
async function running(agent: string): Promise<ExecutionRow> {
  const task = await engine.submit(agent, { message: 'runs' }, 'key:test');
  const [row] = await engine.claim(agent, { owner: 'first', max: 1, waitMs: 0 });
  expect(row?.id).toBe(task.id);
  return row!;
}

const done = (row: ExecutionRow) => engine.complete(row.id, row.lease_token!, { status: 'succeeded' }, 'test');

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'seat-wake', claimPollMs: 600_000 });
});
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

describe(`a freed seat and the parked claims (${STORE_KIND})`, () => {
  it('a claim that found the queue empty is not woken by a completion, and is by the next submit', async () => {
    const a = name('empty');
    await engine.agents.create({ name: a, max_parallel: 3 }, 'test');
    const first = await running(a);
    const spy = spyAdmissions(engine);
    try {
      // Parked while its worker's task runs, as the worker SDK's claim is.
      const claim = engine.claim(a, { owner: 'w', max: 2, waitMs: 600_000 });
      await untilAdmissions(spy, a, 1);
      let heard: (c: { id: string }) => void = () => {};
      const announced = new Promise<void>((resolve) => (heard = (c) => c.id === first.id && resolve()));
      engine.events.on('execution:changed', heard);
      await done(first);
      // The completion's announcement wakes (or not) synchronously; a woken claim looks within the
      // microtasks that follow, before the next macrotask.
      await announced;
      engine.events.off('execution:changed', heard);
      await new Promise((r) => setImmediate(r));
      await admissionsOf(spy, a).settled;
      expect(admissionsOf(spy, a).count).toBe(1);
      const next = await engine.submit(a, { message: 'next' }, 'key:test');
      expect((await claim).map((r) => r.id)).toEqual([next.id]);
    } finally {
      spy.mockRestore();
    }
  });

  it('a claim that found the seats full is woken by a completion and takes the queued task', async () => {
    const a = name('full');
    await engine.agents.create({ name: a, max_parallel: 1 }, 'test');
    const first = await running(a);
    const queued = await engine.submit(a, { message: 'waits for the seat' }, 'key:test');
    const spy = spyAdmissions(engine);
    try {
      const claim = engine.claim(a, { owner: 'w', max: 1, waitMs: 600_000 });
      await untilAdmissions(spy, a, 1);
      await done(first);
      expect((await claim).map((r) => r.id)).toEqual([queued.id]);
    } finally {
      spy.mockRestore();
    }
  });

  it('a claim that found only a task not yet due is woken by a completion (queued work it might take then)', async () => {
    const a = name('later');
    await engine.agents.create({ name: a, max_parallel: 3 }, 'test');
    const first = await running(a);
    await engine.submit(a, { message: 'later', run_after: engine.now() + 3_600_000 }, 'key:test');
    const spy = spyAdmissions(engine);
    const stop = new AbortController();
    try {
      const claim = engine.claim(a, { owner: 'w', max: 1, waitMs: 600_000, signal: stop.signal });
      await untilAdmissions(spy, a, 1);
      await done(first);
      // The freed seat woke it: it looked again (and found the task still not due).
      await untilAdmissions(spy, a, 2);
      stop.abort();
      expect(await claim).toEqual([]);
    } finally {
      stop.abort();
      spy.mockRestore();
    }
  });
});
