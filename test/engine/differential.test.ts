import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { addHoldRule } from '../../src/domain/admission.ts';
import { describeEveryStore, openPaths, runScenario, scenarioArb, type Paths } from '../helpers/differential.ts';

// Differential test: random agent configurations and operation sequences run on SQLite, on
// PostgreSQL with its fast paths (the store's one-statement claim, submit and completion, taken
// where the facts the engine keeps allow) and on PostgreSQL with them off. Every
// answer, event and row must be equal (ids named by first appearance): a rule added on one path
// only fails here. BATON_DIFF_SEED and BATON_DIFF_RUNS pick other sequences; a failure is shrunk
// to a short sequence for up to four minutes (BATON_DIFF_SHRINK=0: report the first as found).

let paths: Paths;

describeEveryStore('differential: every path answers alike', () => {
  beforeAll(async () => {
    paths = await openPaths();
  });
  afterAll(async () => {
    await paths?.close();
  });

  it('random sequences get the same answers, events and rows on SQLite, PostgreSQL fast and PostgreSQL slow', async () => {
    await fc.assert(
      fc.asyncProperty(scenarioArb(), async (sc) => void (await runScenario(paths, sc))),
      {
        numRuns: Number(process.env.BATON_DIFF_RUNS ?? 15),
        seed: Number(process.env.BATON_DIFF_SEED ?? 57),
        endOnFailure: process.env.BATON_DIFF_SHRINK === '0',
        interruptAfterTimeLimit: 240_000,
        markInterruptAsFailure: true,
      },
    );
  }, 300_000);

  it('pool seats, budgets and throttles hold alike on every path, and say so alike', async () => {
    // A fixed sequence through every flow limit (the random ones reach them only now and then):
    // pool 0 has one seat and 10 tokens a minute, pool 1 one start per 10 s; agent 1 draws from
    // both, agent 2 has its own throttle (one start a minute).
    const plain = { max_parallel: 2, max_backlog: 5, max_redeliveries: 0, timeout_seconds: 45, push: false } as const;
    const agent = { ...plain, retry_policy: null, breaker: null, budget: null, paused: false };
    const live = (i: number) => ({ i, pool: 'live' as const });
    const why = (i: number) => ({ k: 'why' as const, ex: live(i) });
    const submit = (a: number) => ({ k: 'submit' as const, agent: a, priority: 0, runAfter: null, key: null });
    const claim = (a: number) => ({ k: 'claim' as const, agent: a, max: 2, push: false });
    const done = (cost: number | null) => ({ k: 'complete', ex: { i: 0, pool: 'running' }, token: 0, status: 'succeeded', cost }) as const;
    const said = (await runScenario(paths, {
      pools: [
        { max_parallel: 1, throttle: null, budget: { limits: [{ metric: 'total_tokens', window: 'minute', limit: 10 }] } },
        { max_parallel: null, throttle: { limit: 1, period_seconds: 10, burst: 0 }, budget: null },
      ],
      agents: [
        { ...agent, pools: [0] },
        { ...agent, pools: [0, 1] },
        { ...agent, throttle: { limit: 1, period_seconds: 60, burst: 0 } },
      ],
      ops: [
        submit(0), // 0: E1
        submit(1), // 1: E2
        claim(0), // 2: E1 takes pool 0's seat
        claim(1), // 3: nothing
        why(1), // 4: E2 waits on pool 0's seat
        done(1), // 5: E1 spends pool 0's 10 tokens
        claim(1), // 6: nothing
        why(0), // 7: E2 waits on pool 0's budget
        { k: 'advance', ms: 60_000 },
        claim(1), // 9: E2 starts (pool 1's first start)
        done(null), // 10
        submit(1), // 11: E3
        claim(1), // 12: nothing
        why(0), // 13: E3 waits on pool 1's throttle
        { k: 'advance', ms: 11_000 },
        claim(1), // 15: E3 starts
        submit(2), // 16: E4
        submit(2), // 17: E5
        claim(2), // 18: E4 only
        why(2), // 19: E5 waits on its agent's throttle
        { k: 'join', agent: 0, pools: [] },
        { k: 'deletePool', pool: 0 }, // 21: refused: agent 1 draws from it
        { k: 'join', agent: 1, pools: [1] },
        { k: 'deletePool', pool: 0 }, // 23: deleted (and made again)
      ],
    })) as Array<{ ok?: unknown; error?: string }>;
    const reason = (i: number) => (said[i]!.ok as { reason: string }).reason;
    expect(said[2]!.ok).toHaveLength(1);
    expect([said[3]!.ok, said[6]!.ok, said[12]!.ok]).toEqual([[], [], []]);
    expect([reason(4), reason(7), reason(13), reason(19)]).toEqual(['pool_full', 'pool_budget_spent', 'pool_throttled', 'throttled']);
    expect([said[9]!.ok, said[15]!.ok, said[18]!.ok].map((x) => (x as unknown[]).length)).toEqual([1, 1, 1]);
    expect(said[21]).toEqual({ error: 'pool_in_use' });
    expect(said[23]!.ok).toBeDefined();
  }, 120_000);

  it('a hold declared only in TypeScript holds alike on every path', async () => {
    // A new hold is one entry of the hold list: no SQL. Agents named `declared-*` are held, as if
    // paused; the fast claim path learns it from the agent's fact, so every path holds.
    const remove = addHoldRule({
      reason: 'agent_paused',
      decide: (a) =>
        a.name?.startsWith('declared-') ? { reason: 'agent_paused', by: 'declared', why: 'a hold written once', since: 0 } : null,
      mayApply: (a) => a.name.startsWith('declared-'),
    });
    try {
      const agent = { max_parallel: 1, max_backlog: 5, max_redeliveries: 0, timeout_seconds: 45, push: false } as const;
      const said = await runScenario(
        paths,
        {
          agents: [{ ...agent, retry_policy: null, breaker: null, budget: null, paused: false }],
          ops: [
            { k: 'submit', agent: 0, priority: 0, runAfter: null, key: null },
            { k: 'claim', agent: 0, max: 1, push: false },
          ],
        },
        { prefix: 'declared-' },
      );
      expect(said[1]).toEqual({ ok: [] });
      // And the random sequences still agree with it in force.
      await fc.assert(
        fc.asyncProperty(scenarioArb(), async (sc) => void (await runScenario(paths, sc, { prefix: 'declared-' }))),
        { numRuns: 5, seed: 57 },
      );
    } finally {
      remove();
    }
  }, 300_000);
});
