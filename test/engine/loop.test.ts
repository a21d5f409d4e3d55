import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { LeaderLease } from '../../src/engine/leader.ts';
import { startLoop } from '../../src/engine/loop.ts';
import { createNodeMetrics } from '../../src/metrics.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'loop-test' });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

const until = async (done: () => boolean, ms = 5_000) => {
  const end = Date.now() + ms;
  while (!done()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 5));
  }
};

describe('the loop helper', () => {
  it('a failed pass is reported as loop:error, counted per loop, and the loop goes on', async () => {
    const metrics = createNodeMetrics(engine);
    const errors: string[] = [];
    const onError = ({ loop }: { loop: string }) => errors.push(loop);
    engine.events.on('loop:error', onError);
    let passes = 0;
    const loop = startLoop(
      {
        name: 'flaky',
        intervalMs: 10,
        once: async () => {
          passes++;
          if (passes <= 2) throw new Error('store unavailable');
        },
      },
      engine.events,
    );
    try {
      await until(() => passes >= 4);
    } finally {
      await loop.stop();
      engine.events.off('loop:error', onError);
    }
    expect(errors).toEqual(['flaky', 'flaky']);
    const body = (await metrics.render()).body;
    metrics.close();
    expect(body).toMatch(/baton_loop_errors_total\{loop="flaky"\} 2/);
  });

  it('immediate: the first pass runs at start, not one interval later', async () => {
    let at: number | undefined;
    const started = Date.now();
    const loop = startLoop(
      { name: 'first', intervalMs: 60_000, immediate: true, once: async () => void (at ??= Date.now()) },
      engine.events,
    );
    await until(() => at !== undefined);
    await loop.stop();
    expect(at! - started).toBeLessThan(1_000);
  });

  it('stopping aborts the signal a pass in hand was given, and waits for that pass to end', async () => {
    let seen: AbortSignal | undefined;
    let ended = false;
    const loop = startLoop(
      {
        name: 'long',
        intervalMs: 60_000,
        immediate: true,
        // A pass of many steps (as the canary's catch-up): it ends at the first step after the abort.
        once: async (stopping) => {
          seen = stopping;
          while (!stopping.aborted) await new Promise((r) => setTimeout(r, 5));
          ended = true;
        },
      },
      engine.events,
    );
    await until(() => seen !== undefined);
    expect(seen!.aborted).toBe(false);
    await loop.stop();
    expect(seen!.aborted).toBe(true);
    expect(ended).toBe(true);
  });

  it('leader-only: one process runs the pass while it holds the lease; stopping hands it on', async () => {
    const ran = { a: 0, b: 0 };
    const leaseA = new LeaderLease(ts.store, 'loop-test', 'node-a', 60_000);
    const leaseB = new LeaderLease(ts.store, 'loop-test', 'node-b', 60_000);
    const a = startLoop({ name: 'led', intervalMs: 10, leader: leaseA, once: async () => void ran.a++ }, engine.events);
    await until(() => ran.a >= 3);
    const b = startLoop({ name: 'led', intervalMs: 10, leader: leaseB, once: async () => void ran.b++ }, engine.events);
    await new Promise((r) => setTimeout(r, 100));
    expect(ran.b).toBe(0); // a holds the lease, b's passes are skipped
    await a.stop(); // releases the lease at once, rather than after 60 s
    expect((await leaseA.holder())?.owner).not.toBe('node-a');
    await until(() => ran.b >= 3);
    await b.stop();
    expect(await leaseB.holder()).toBeUndefined();
  });
});
