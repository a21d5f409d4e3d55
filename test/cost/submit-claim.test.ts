/**
 * A submit to an agent with a claim parked on it in this process costs one commit for both: on
 * PostgreSQL one statement (the submit's call, which admits the parked claim: FastPaths.submitClaim)
 * and one transaction, read from the rows themselves (every row the submit and the admission wrote
 * carries the same xmin); on SQLite the woken claim's admission runs in the submit's group COMMIT
 * (StoreAdapter.shareCommit). Statements are
 * counted as the engine sends them (a recording Kysely plugin), as test/cost/one-statement.test.ts does.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { agentMaker } from '../helpers/agents.ts';
import { countingStore, noneSent } from '../helpers/counting-store.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const sent = noneSent();
const pg = STORE_KIND === 'postgres';

type Admit = (agent: string) => Promise<ExecutionRow[]>;

const newAgent = agentMaker(() => engine, 'cost-sc', { max_parallel: 1, max_backlog: 100, breaker: null });

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: countingStore(ts.store, sent), nodeId: 'cost-submit-claim', claimPollMs: 600_000 });
});
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

/** Resolves once the spy has seen `count` admissions, they have ended, and their claims have parked. */
async function parked(spy: MockInstance<Admit>, count: number): Promise<void> {
  await vi.waitFor(() => expect(spy.mock.calls.length).toBeGreaterThanOrEqual(count), { timeout: 20_000, interval: 2 });
  await Promise.allSettled(spy.mock.results.map((r) => r.value));
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
}

describe(`a submit and the claim parked on its agent: one commit (${STORE_KIND})`, () => {
  it('admits the parked claim in the submit’s own statement and commit', async () => {
    const agent = await newAgent();
    const spy: MockInstance<Admit> = vi.spyOn(engine as unknown as { admitOnce: Admit }, 'admitOnce');
    try {
      const claim = engine.claim(agent, { owner: 'w', waitMs: 20_000 });
      await parked(spy, 1);
      sent.statements = 0;
      sent.transactions = 0;
      const made = await engine.submit(agent, { message: 'one commit' }, 'test');
      const [got] = await claim;
      expect([got?.id, got?.status]).toEqual([made.id, 'running']);
      expect(spy).toHaveBeenCalledTimes(pg ? 1 : 2); // SQLite: the woken claim's admission, in the submit's commit
      if (pg) {
        expect(sent).toEqual({ statements: 1, transactions: 0 });
        // Every row written for the task, by the submit and by the admission, in one transaction.
        const xmins = await sql<{ xmin: string }>`
          SELECT xmin::text FROM executions WHERE id = ${made.id}
          UNION ALL SELECT xmin::text FROM execution_events WHERE execution_id = ${made.id}
          UNION ALL SELECT xmin::text FROM audit_log WHERE execution_id = ${made.id}`.execute(ts.store.db);
        expect(xmins.rows.length).toBe(4); // the row, its queued and running events, its creation audit
        expect(new Set(xmins.rows.map((r) => r.xmin)).size).toBe(1);
      }
      // SQLite's one COMMIT is counted with the WAL's own frames in test/store/store.group-commit.test.ts,
      // on a store nothing else writes to.
    } finally {
      spy.mockRestore();
    }
  });

  it('submits gathered into one call take the claims parked on their agents: still one statement for all', async () => {
    const agents = await Promise.all([newAgent(), newAgent(), newAgent()]);
    const spy: MockInstance<Admit> = vi.spyOn(engine as unknown as { admitOnce: Admit }, 'admitOnce');
    try {
      const claims = agents.map((a, i) => engine.claim(a, { owner: `w${i}`, waitMs: 20_000 }));
      await parked(spy, agents.length);
      sent.statements = 0;
      sent.transactions = 0;
      const made = await Promise.all(agents.map((a) => engine.submit(a, { message: a }, 'test')));
      const got = await Promise.all(claims);
      expect(got.map((rows) => rows.map((r) => r.id))).toEqual(made.map((m) => [m.id]));
      if (pg) expect(sent).toEqual({ statements: 1, transactions: 0 });
      expect(spy).toHaveBeenCalledTimes(pg ? agents.length : 2 * agents.length);
    } finally {
      spy.mockRestore();
    }
  });

  it('a claim on several agents, parked, is taken by a submit of one of them: one statement, and it answers the submit’s row', async () => {
    const agents = await Promise.all([newAgent(), newAgent(), newAgent()]);
    const spy: MockInstance<Admit> = vi.spyOn(engine as unknown as { admitOnce: Admit }, 'admitOnce');
    try {
      const claim = engine.claimAny(
        agents.map((agent) => ({ agent, max: 1 })),
        { owner: 'w-any', waitMs: 20_000 },
      );
      await parked(spy, agents.length);
      spy.mockClear();
      sent.statements = 0;
      sent.transactions = 0;
      const made = await engine.submit(agents[1]!, { message: 'taken' }, 'test');
      const got = await claim;
      expect(got.map((r) => [r.id, r.status, r.lease_owner])).toEqual([[made.id, 'running', 'w-any']]);
      if (pg) {
        expect(sent).toEqual({ statements: 1, transactions: 0 });
        expect(spy).toHaveBeenCalledTimes(0); // the submit's call admitted it: the claim made no look of its own
      }
      // Taken once: the other agents' offers were withdrawn, so a second submit finds no claim to take.
      const other = await engine.submit(agents[2]!, { message: 'not taken' }, 'test');
      expect((await engine.executionHead(other.id))?.status).toBe('queued');
    } finally {
      spy.mockRestore();
    }
  });
});
