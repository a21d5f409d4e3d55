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
