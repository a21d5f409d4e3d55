/**
 * A claim on many agents looks at each agent that no mark says is idle (claim-any.ts); with one
 * producer feeding 100 agents, most of those looks find nothing. On PostgreSQL each is an
 * admission in the store's claim call (a row lock and two index seeks in baton_claim_many), so a
 * look at many agents none of which was woken for work reads first which have no queued row and
 * nothing an empty admission would write (src/engine/empty-looks.ts): one statement, and only the
 * others are admitted; a claim that took the last row of its agent says so, so a later look covers
 * only the agents fed since. On SQLite the admission's agent read already carries the count
 * (test/cost/empty-look.test.ts), and nothing changes. Admissions counted by a spy on the engine's
 * admitOnce; statements as the engine sends them (test/helpers/counting-store.ts).
 */
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { EMPTY_LOOKS_FROM } from '../../src/engine/empty-looks.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { agentMaker } from '../helpers/agents.ts';
import { manualClock } from '../helpers/clock.ts';
import { countingStore, noneSent } from '../helpers/counting-store.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
const sent = noneSent();
const pg = STORE_KIND === 'postgres';
const AGENTS = EMPTY_LOOKS_FROM + 4;

type Admit = (agent: string) => Promise<ExecutionRow[]>;

const newAgent = agentMaker(() => engine, 'empty-looks', { max_parallel: 3, max_backlog: 100, breaker: null });

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: countingStore(ts.store, sent), clock, nodeId: 'empty-looks', claimPollMs: 600_000 });
});
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

/**
 * `n` new agents, each claimed once on its empty queue (its claim stamp written: looks within the
 * interval write nothing) by another engine on the store, as another process's claim: that claim
 * marks them idle there (ClaimWaits.markIfEmpty), not in `engine`, whose looks this file counts.
 */
async function stampedAgents(n: number): Promise<string[]> {
  const agents: string[] = [];
  for (let i = 0; i < n; i++) agents.push(await newAgent());
  const elsewhere = new Engine({ store: ts.store, clock, nodeId: 'empty-looks-elsewhere', claimPollMs: 600_000 });
  try {
    for (const a of agents) expect(await elsewhere.claim(a, { owner: 'w', max: 3 })).toEqual([]);
  } finally {
    elsewhere.close();
  }
  return agents;
}

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

describe(`a claim's look at many agents with nothing queued (${STORE_KIND})`, () => {
  it('admits only the agents with queued work on PostgreSQL, after one read of the others', async () => {
    const agents = await stampedAgents(AGENTS);
    const fed = [agents[2]!, agents[7]!].sort();
    const made = await Promise.all(fed.map((a) => engine.submit(a, { message: 'work' }, 'test')));
    sent.statements = 0;
    const { out, agents: admitted } = await admissions(() =>
      engine.claimAny(
        agents.map((agent) => ({ agent, max: 3 })),
        { owner: 'w', waitMs: 20_000 },
      ),
    );
    expect(out.map((r) => r.id).sort()).toEqual(made.map((m) => m.id).sort());
    if (pg) {
      expect(admitted).toEqual(fed);
      expect(sent.statements).toBe(2); // the read, then the claim call for the two
    } else expect(admitted).toEqual([...agents].sort());
  });

  it('reads nothing first once a look here took every row its agents had: their claims marked them idle', async () => {
    const agents = await stampedAgents(AGENTS);
    const made = await Promise.all(agents.map((a) => engine.submit(a, { message: 'first' }, 'test')));
    const all = agents.map((agent) => ({ agent, max: 3 }));
    const first = await engine.claimAny(all, { owner: 'w', waitMs: 20_000 });
    expect(first.map((r) => r.id).sort()).toEqual(made.map((m) => m.id).sort());
    const fed = agents[3]!;
    const again = await engine.submit(fed, { message: 'second' }, 'test');
    sent.statements = 0;
    const { out, agents: admitted } = await admissions(() => engine.claimAny(all, { owner: 'w', waitMs: 20_000 }));
    expect(out.map((r) => r.id)).toEqual([again.id]);
    expect(admitted).toEqual([fed]);
    // The claim call alone: each agent's claim said it took the last row (baton_claim_many's 'empty').
    if (pg) expect(sent.statements).toBe(1);
  });

  it('reads nothing first for agents a look here answered for, which still have work', async () => {
    const agents = await stampedAgents(AGENTS);
    for (const a of agents) for (let k = 0; k < 2; k++) await engine.submit(a, { message: `w${k}` }, 'test');
    const one = agents.map((agent) => ({ agent, max: 1 }));
    expect(await engine.claimAny(one, { owner: 'w', waitMs: 20_000 })).toHaveLength(AGENTS);
    sent.statements = 0;
    const { out, agents: admitted } = await admissions(() => engine.claimAny(one, { owner: 'w', waitMs: 20_000 }));
    expect(out).toHaveLength(AGENTS);
    expect(admitted).toEqual([...agents].sort());
    if (pg) expect(sent.statements).toBe(1);
  });

  it('parks after the read, and work queued afterwards reaches the claim', async () => {
    const agents = await stampedAgents(AGENTS);
    const { out, agents: admitted } = await admissions(async () => {
      const claim = engine.claimAny(
        agents.map((agent) => ({ agent, max: 3 })),
        { owner: 'w', waitMs: 20_000 },
      );
      // Parked once it has looked: on PostgreSQL no agent was admitted, elsewhere each once.
      await new Promise((r) => setTimeout(r, 200));
      return { claim };
    });
    const { claim } = out;
    expect(admitted).toEqual(pg ? [] : [...agents].sort());
    const made = await engine.submit(agents[5]!, { message: 'later' }, 'test');
    expect((await claim).map((r) => r.id)).toEqual([made.id]);
  });

  it('still admits an agent whose claim stamp is due, which writes it', async () => {
    const agents = await stampedAgents(AGENTS);
    clock.advance(60_000); // every stamp due again
    const { out, agents: admitted } = await admissions(() =>
      engine.claimAny(
        agents.map((agent) => ({ agent, max: 3 })),
        { owner: 'w', waitMs: 0 },
      ),
    );
    expect(out).toEqual([]);
    expect(admitted).toEqual([...agents].sort());
    const stamps = await ts.store.db.selectFrom('agents').select('last_claim_at').where('name', 'in', agents).execute();
    expect(stamps.map((s) => Number(s.last_claim_at))).toEqual(agents.map(() => clock()));
  });
});
