/**
 * An admission that takes every row its agent has queued leaves nothing for a look right after it.
 * It says so from the agent's backlog counters (SQLite: admission's agent read carries them;
 * PostgreSQL: baton_claim_many reads them after its takes and answers 'empty', migration 0120), and
 * the agent is marked idle (IdleAgents) as a look that found nothing would mark it: the worker SDK's next claim on many agents, sent as soon as one answers, then skips the
 * agent whose one task it just got instead of an admission that finds its queue empty (in
 * W1-users, one such look a task). The mark never hides work: one that took fewer than were queued
 * marks nothing, and a submit afterwards clears it. Admissions counted by a spy on the engine's
 * admitOnce.
 */
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { agentMaker } from '../helpers/agents.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();

type Admit = (agent: string) => Promise<ExecutionRow[]>;

const newAgent = agentMaker(() => engine, 'took-all', { max_parallel: 3, max_backlog: 100, breaker: null });

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'took-all', claimPollMs: 600_000 });
});
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

/** The agents `fn` admitted for (engine.admitOnce), and what it returned. */
async function admissions<T>(fn: () => Promise<T>): Promise<{ out: T; agents: string[] }> {
  const spy: MockInstance<Admit> = vi.spyOn(engine as unknown as { admitOnce: Admit }, 'admitOnce');
  try {
    const out = await fn();
    return { out, agents: spy.mock.calls.map((c) => c[0]).sort() };
  } finally {
    spy.mockRestore();
  }
}

const settle = () => new Promise((r) => setTimeout(r, 100));

/** A claim on `agents`, up to 3 each, waiting; ended by `end` if it is still waiting. */
function claimOn(agents: readonly string[], end: AbortController): Promise<ExecutionRow[]> {
  return engine.claimAny(
    agents.map((agent) => ({ agent, max: 3 })),
    { owner: 'w', waitMs: 20_000, end: end.signal },
  );
}

describe(`a claim on many agents right after one that took all its agent had queued (${STORE_KIND})`, () => {
  it('skips that agent, and takes work queued for it afterwards', async () => {
    const a = await newAgent();
    const b = await newAgent();
    const made = await engine.submit(a, { message: 'only one' }, 'test');
    expect((await claimOn([a, b], new AbortController())).map((r) => r.id)).toEqual([made.id]);
    const { out, agents } = await admissions(async () => {
      const next = claimOn([a, b], new AbortController());
      await settle();
      return { next }; // still waiting
    });
    // b was found empty by the first claim's look, and a left empty by it: neither is looked at.
    expect(agents).toEqual([]);
    const later = await engine.submit(a, { message: 'queued after' }, 'test');
    expect((await out.next).map((r) => r.id)).toEqual([later.id]);
  });

  it('looks at the agent again when the admission took fewer than were queued', async () => {
    const a = await newAgent();
    const made = [];
    for (let i = 0; i < 4; i++) made.push(await engine.submit(a, { message: `task ${i}` }, 'test'));
    const first = await claimOn([a], new AbortController());
    expect(first.map((r) => r.id)).toEqual(made.slice(0, 3).map((m) => m.id));
    for (const r of first) await engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'w');
    const { out, agents } = await admissions(() => claimOn([a], new AbortController()));
    expect(agents).toEqual([a]);
    expect(out.map((r) => r.id)).toEqual([made[3]!.id]);
  });

  it('looks at the agent when work was queued after the admission that took all (the submit cleared the mark)', async () => {
    const a = await newAgent();
    const first = await engine.submit(a, { message: 'first' }, 'test');
    expect((await claimOn([a], new AbortController())).map((r) => r.id)).toEqual([first.id]);
    const second = await engine.submit(a, { message: 'second' }, 'test');
    const { out, agents } = await admissions(() => claimOn([a], new AbortController()));
    expect(agents).toEqual([a]);
    expect(out.map((r) => r.id)).toEqual([second.id]);
  });
});
