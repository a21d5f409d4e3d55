/**
 * A completion's claim (complete-and-claim: a claim that does not wait) that finds its agent with
 * no queued row marks the agent idle (IdleAgents), as a look of a claim on many agents does. The
 * worker SDK then widens its parked claim on many agents with that agent (POST /v1/claim/widen):
 * the claim watches it without an admission of its own (on PostgreSQL a statement and a row lock
 * in the store's claim call). The mark never hides work: a submit in between (in this process, or
 * in another one over the store's signals) clears it, and the widened claim looks and takes it.
 * Admissions counted by a spy on the engine's admitOnce; statements as the engine sends them
 * (test/helpers/counting-store.ts).
 */
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import type { Widening } from '../../src/engine/claim-any.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { agentMaker } from '../helpers/agents.ts';
import { manualClock } from '../helpers/clock.ts';
import { countingStore, noneSent } from '../helpers/counting-store.ts';
import { openTestStore, PG_URL, STORE_KIND, untilHearing, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
const sent = noneSent();
const pg = STORE_KIND === 'postgres';

type Admit = (agent: string) => Promise<ExecutionRow[]>;

const newAgent = agentMaker(() => engine, 'idle-mark', { max_parallel: 1, max_backlog: 100, breaker: null });

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: countingStore(ts.store, sent), clock, nodeId: 'idle-mark', claimPollMs: 600_000 });
});
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

/** The agents `e` admitted for (admitOnce) while `fn` ran, and what it returned. */
async function admissions<T>(e: Engine, fn: () => Promise<T>): Promise<{ out: T; agents: string[] }> {
  const spy: MockInstance<Admit> = vi.spyOn(e as unknown as { admitOnce: Admit }, 'admitOnce');
  try {
    const out = await fn();
    return { out, agents: spy.mock.calls.map((c) => c[0]) };
  } finally {
    spy.mockRestore();
  }
}

const settle = () => new Promise((r) => setTimeout(r, 200));

/**
 * `full` at its cap with one task, and a claim on `other` parked (its look done), widenable; then
 * the task completed and its agent claimed again without a wait (a completion's claim), which finds nothing.
 */
async function parkedThenCompleted(): Promise<{ full: string; claim: Promise<ExecutionRow[]>; widening: Widening }> {
  const full = await newAgent();
  const other = await newAgent();
  await engine.submit(full, { message: 'first' }, 'test');
  const [task] = await engine.claim(full, { owner: 'w', max: 1 });
  const widening: Widening = {};
  const claim = engine.claimAny([{ agent: other, max: 1 }], { owner: 'w', waitMs: 20_000, widening });
  await settle();
  await engine.complete(task!.id, task!.lease_token!, { status: 'succeeded' }, 'w');
  expect(await engine.claim(full, { owner: 'w', max: 1 })).toEqual([]);
  return { full, claim, widening };
}

describe(`a claim on many agents widened with an agent a completion's claim just found empty (${STORE_KIND})`, () => {
  it('watches the agent without an admission (on PostgreSQL no statement), and takes work queued afterwards', async () => {
    const { full, claim, widening } = await parkedThenCompleted();
    sent.statements = 0;
    const { agents: admitted } = await admissions(engine, async () => {
      expect(widening.add!([{ agent: full, max: 1 }])).toBe(true);
      await settle();
    });
    expect(admitted).toEqual([]);
    if (pg) expect(sent.statements).toBe(0);
    const made = await engine.submit(full, { message: 'later' }, 'test');
    expect((await claim).map((r) => r.id)).toEqual([made.id]);
  });

  it('looks at the agent when work was queued after that claim: the submit cleared the mark', async () => {
    const { full, claim, widening } = await parkedThenCompleted();
    const made = await engine.submit(full, { message: 'queued before the widening' }, 'test');
    const { agents: admitted } = await admissions(engine, async () => {
      expect(widening.add!([{ agent: full, max: 1 }])).toBe(true);
      expect((await claim).map((r) => r.id)).toEqual([made.id]);
    });
    expect(admitted).toEqual([full]);
  });

  it.runIf(pg)('looks at the agent when another process queued work after that claim (its signal cleared the mark)', async () => {
    const other = openPostgres({ url: PG_URL, schema: ts.location.schema, poolMax: 2 });
    const there = new Engine({ store: other, nodeId: 'idle-mark-other', claimPollMs: 600_000 });
    try {
      await untilHearing(ts.store, other);
      const { full, claim, widening } = await parkedThenCompleted();
      const made = await there.submit(full, { message: 'queued in another process' }, 'test');
      // The other process's announcement reaches this one over LISTEN/NOTIFY.
      for (let i = 0; i < 100 && engine['claimWaits'].idle.known(full); i++) await new Promise((r) => setTimeout(r, 50));
      const { agents: admitted } = await admissions(engine, async () => {
        expect(widening.add!([{ agent: full, max: 1 }])).toBe(true);
        expect((await claim).map((r) => r.id)).toEqual([made.id]);
      });
      expect(admitted).toEqual([full]);
    } finally {
      there.close();
      await other.close();
    }
  });
});
