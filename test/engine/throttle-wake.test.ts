/**
 * A parked claim and a closed throttle, on the manual clock, on both stores: the claim looks again
 * when the throttle reopens (a timer at the reopening, for a key's throttle as for the agent's),
 * and a look that finds it still closed by a few ms (its timer fired early on the engine's clock)
 * arms a timer for the reopening again rather than waiting for the poll.
 *
 * The engine polls every 10 minutes and each claim waits longer than its test may take, so only a
 * timer at the reopening admits in time. Which looks a claim has made is read from the clock: each look and
 * each wait after it read the engine's clock once, so two readings at a time no one else reads
 * mean one look and the wait after it.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Throttle } from '../../src/domain/throttle.ts';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
/** How often the engine read the clock at each time. */
const reads = new Map<number, number>();
let n = 0;
/** Longer than a test may take: a claim that is not woken does not end in time, even by its last look. */
const WAIT_MS = 50_000;
/** One start per 6 s, no burst: after a start at t0 the throttle reopens at t0 + 6 s. */
const THROTTLE: Throttle = { limit: 1, period_seconds: 6, burst: 0 };

beforeAll(async () => {
  ts = await openTestStore();
  const readClock = () => {
    const t = clock();
    reads.set(t, (reads.get(t) ?? 0) + 1);
    return t;
  };
  engine = new Engine({
    store: ts.store,
    clock: readClock,
    nodeId: 'throttle-wake-test',
    backlogExpiryMs: 86_400_000,
    claimPollMs: 600_000,
  });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});
beforeEach(() => {
  clock.set(Date.UTC(2026, 0, 12, 9, 0, 0) + ++n * 3_600_000);
  reads.clear();
});

/** Until the engine has read the clock `times` times at the current time (at most 20 s). */
async function readsNow(times: number): Promise<void> {
  const end = performance.now() + 20_000;
  while ((reads.get(clock()) ?? 0) < times && performance.now() < end) await new Promise((r) => setTimeout(r, 5));
}

type Shape = 'key' | 'agent';
const shapes: Shape[] = ['key', 'agent'];

/** An agent whose key `k` (or the agent itself) is throttled, with two tasks of key `k`; one started at t0. */
async function startedOne(shape: Shape): Promise<{ agent: string; t0: number }> {
  const agent = `thw-${shape}-${n}`;
  await engine.agents.create(
    { name: agent, max_parallel: 5, ...(shape === 'key' ? { key_throttle: THROTTLE } : { throttle: THROTTLE }) },
    'test',
  );
  for (let i = 0; i < 2; i++) await engine.submit(agent, { message: `task ${i}`, key: 'k' }, 'key:test');
  const t0 = clock();
  expect(await engine.claim(agent, { owner: 'w1', max: 1 })).toHaveLength(1);
  return { agent, t0 };
}

describe(`a parked claim and a closed throttle (${STORE_KIND})`, () => {
  it.each(shapes)(
    'is woken when the %s throttle reopens',
    async (shape) => {
      const { agent } = await startedOne(shape);
      clock.advance(5_000);
      const parked = engine.claim(agent, { owner: 'w2', max: 1, waitMs: WAIT_MS });
      await readsNow(2); // it looked and found the throttle closed for 1 s more
      clock.advance(1_000);
      expect(await parked).toHaveLength(1);
    },
    45_000,
  );

  it.each(shapes)(
    'that finds the %s throttle still closed by a few ms arms a timer again',
    async (shape) => {
      const { agent, t0 } = await startedOne(shape);
      clock.advance(5_000);
      const parked = engine.claim(agent, { owner: 'w2', max: 1, waitMs: WAIT_MS });
      await readsNow(2);
      // Its timer fires 1 s on; by then the engine's clock says 5 ms before the reopening.
      clock.set(t0 + 5_995);
      await readsNow(2); // it looked again and found the throttle closed for 5 ms more
      expect(reads.get(t0 + 5_995) ?? 0).toBeGreaterThanOrEqual(2);
      clock.set(t0 + 6_000);
      expect(await parked).toHaveLength(1);
    },
    45_000,
  );
});
