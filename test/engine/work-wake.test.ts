/**
 * A wake-up for work just queued is not spent on a claim that takes other work, on both stores.
 * The claim woken for a new task (the one armed longest) may take an older task instead: its look
 * began before the new task was committed, or admission gave the seat to a task that came due
 * meanwhile. The new task is still queued, so the next parked claim of its agent is woken for it
 * and takes it at once. The poll is off (claimPollMs of ten minutes) and every claim waits longer
 * than a test may take: a claim nobody wakes does not end in time.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let n = 0;
const name = (p: string) => `${p}-${++n}`;
const WAIT_MS = 600_000;

type Admit = (agent: string, opts: unknown) => Promise<ExecutionRow[]>;
const original = (Engine.prototype as unknown as { admitOnce: Admit }).admitOnce;
const spyAdmissions = (e: Engine): MockInstance<Admit> => vi.spyOn(e as unknown as { admitOnce: Admit }, 'admitOnce');

/** Until `agent` has had `count` admissions and all of them have ended. */
async function untilAdmissions(spy: MockInstance<Admit>, agent: string, count: number): Promise<void> {
  const mine = () => spy.mock.calls.flatMap((args, i) => (args[0] === agent ? [spy.mock.results[i]!] : []));
  await vi.waitFor(() => expect(mine().length).toBeGreaterThanOrEqual(count), { timeout: 20_000, interval: 5 });
  await Promise.allSettled(mine().map((r) => r.value));
}

/** The ids a claim got, or 'not woken' when it had none within 10 s. */
async function within(claim: Promise<ExecutionRow[]>): Promise<string[] | 'not woken'> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<'not woken'>((resolve) => (timer = setTimeout(() => resolve('not woken'), 10_000)));
  try {
    return await Promise.race([claim.then((rows) => rows.map((r) => r.id)), late]);
  } finally {
    clearTimeout(timer);
  }
}

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'work-wake', backlogExpiryMs: 86_400_000, claimPollMs: 600_000 });
});
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});
beforeEach(() => clock.set(Date.UTC(2026, 0, 12, 9, 0, 0) + ++n * 3_600_000));

describe(`a wake-up for new work and the claim that takes other work (${STORE_KIND})`, () => {
  const submits = ['submit', 'submitMany'] as const;

  it.each(submits)('a claim woken in its look, whose look takes an older task, passes the new task on (%s)', async (how) => {
    const a = name('in-look');
    await engine.agents.create({ name: a, max_parallel: 3 }, 'test');
    const older = await engine.submit(a, { message: 'older' }, 'key:test');
    const spy = spyAdmissions(engine);
    const stop = new AbortController();
    let release = () => {};
    const gate = new Promise<void>((r) => (release = r));
    let held = false;
    // The first look takes `older` and commits, and its answer is held until the new task is queued.
    spy.mockImplementation(async function (this: Engine, agent, opts) {
      const rows = await original.call(this, agent, opts);
      if (!held) {
        held = true;
        await gate;
      }
      return rows;
    });
    try {
      const first = engine.claim(a, { owner: 'w1', max: 1, waitMs: WAIT_MS, signal: stop.signal });
      await vi.waitFor(() => expect(held).toBe(true), { timeout: 20_000, interval: 5 });
      const second = engine.claim(a, { owner: 'w2', max: 1, waitMs: WAIT_MS, signal: stop.signal });
      await vi.waitFor(() => expect(spy.mock.calls.length).toBe(2), { timeout: 20_000, interval: 5 });
      await spy.mock.results[1]!.value;
      // Queued while the first claim is still in its look (armed, so its wake-up is not lost).
      const fresh =
        how === 'submit'
          ? await engine.submit(a, { message: 'new' }, 'key:test')
          : await engine.submitMany(a, [{ message: 'new' }], 'key:test').then(([o]) => ({ id: (o as { id: string }).id }));
      release();
      expect(await within(first)).toEqual([older.id]);
      expect(await within(second)).toEqual([fresh.id]);
    } finally {
      release();
      stop.abort();
      spy.mockRestore();
    }
  });

  it('a parked claim woken for a new task, which takes a task come due, passes the new task on', async () => {
    const a = name('due');
    await engine.agents.create({ name: a, max_parallel: 3 }, 'test');
    const due = await engine.submit(a, { message: 'due in a second', run_after: clock() + 1_000 }, 'key:test');
    const spy = spyAdmissions(engine);
    const stop = new AbortController();
    try {
      const first = engine.claim(a, { owner: 'w1', max: 1, waitMs: WAIT_MS, signal: stop.signal });
      await untilAdmissions(spy, a, 1);
      const second = engine.claim(a, { owner: 'w2', max: 1, waitMs: WAIT_MS, signal: stop.signal });
      await untilAdmissions(spy, a, 2);
      // The task comes due unannounced (the poll would find it); the new task is announced.
      clock.advance(2_000);
      const [out] = await engine.submitMany(a, [{ message: 'new' }], 'key:test');
      const fresh = (out as { id: string }).id;
      // The claim armed longest is woken for the new task and admission gives it the older one first.
      expect(await within(first)).toEqual([due.id]);
      expect(await within(second)).toEqual([fresh]);
    } finally {
      stop.abort();
      spy.mockRestore();
    }
  });
});
