/**
 * A claim on several agents lets its caller widen it while it waits (claim-any.ts, Widening): `add`
 * is set while it waits and unset as it ends. A caller that kept `add` past the claim's end is
 * refused (false) and arms nothing: a waiter armed for a claim that has answered would take, as
 * the one armed longest, the wake-up of the next claimer of that agent (waiter-set.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Widening } from '../../src/engine/claim-any.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { ClaimWaits } from '../../src/engine/waiters.ts';
import { agentMaker } from '../helpers/agents.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;

const newAgent = agentMaker(() => engine, 'widen-kept', { max_parallel: 3, max_backlog: 100, breaker: null });

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'widen-kept', claimPollMs: 600_000 });
});
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

const armedAgents = () => (engine as unknown as { claimWaits: ClaimWaits }).claimWaits.waiters.agents();

describe(`a widening kept past its claim's end (${STORE_KIND})`, () => {
  it('is refused and arms nothing, so the next claimer of that agent is the one woken', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    // b known idle here: a widening arms it at once rather than looking at it.
    expect(await engine.claim(b, { owner: 'w', max: 1 })).toEqual([]);
    const widening: Widening = {};
    const claim = engine.claimAny([{ agent: a, max: 1 }], { owner: 'w', waitMs: 20_000, widening });
    const kept = widening.add!;
    expect(kept).toBeTypeOf('function');
    const made = await engine.submit(a, { message: 'answers the claim' }, 'test');
    expect((await claim).map((r) => r.id)).toEqual([made.id]);
    expect(widening.add).toBeUndefined();

    expect(kept([{ agent: b, max: 1 }])).toBe(false);
    expect(armedAgents()).not.toContain(b);
    const next = engine.claim(b, { owner: 'w', max: 1, waitMs: 20_000 });
    await new Promise((r) => setTimeout(r, 50)); // parked
    const work = await engine.submit(b, { message: 'for the next claimer' }, 'test');
    expect((await next).map((r) => r.id)).toEqual([work.id]);
  });
});
