import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { addHoldRule } from '../../src/domain/admission.ts';
import { describeEveryStore, Divergence, openPaths, runScenario, scenarioArb, type Paths, type Scenario } from '../helpers/differential.ts';

// The differential harness (test/engine/differential.test.ts) catching drift: a hold planted in
// TypeScript only. Agents named `planted-*` are held, as if paused, by a hold rule whose `mayApply`
// says it never applies: an undeclared hold, so nothing tells the PostgreSQL fast claim path, which
// admits. SQLite and PostgreSQL with the fast paths off decide in TypeScript and hold. The harness
// must name the first claim that differs, with PostgreSQL fast the odd one out.

let removePlanted: (() => void) | undefined;
let paths: Paths;

const plain = { max_parallel: 1, max_backlog: 5, max_redeliveries: 0, timeout_seconds: 45, push: false } as const;
const noHolds = { retry_policy: null, breaker: null, budget: null, paused: false };

/** The Divergence `run` throws (failing the test when it throws none or something else). */
async function divergenceOf(run: () => Promise<void>): Promise<Divergence> {
  const err = await run().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Divergence);
  return err as Divergence;
}

describeEveryStore('differential: a hold planted in TypeScript only', () => {
  beforeAll(async () => {
    removePlanted = addHoldRule({
      reason: 'agent_paused',
      decide: (a) =>
        a.name?.startsWith('planted-') ? { reason: 'agent_paused', by: 'planted', why: 'a hold only TypeScript knows', since: 0 } : null,
      mayApply: () => false,
    });
    paths = await openPaths();
  });
  afterAll(async () => {
    removePlanted?.();
    await paths?.close();
  });

  it('is caught at the first claim: PostgreSQL fast admits, the other paths hold', async () => {
    const sc: Scenario = {
      agents: [{ ...plain, ...noHolds }],
      ops: [
        { k: 'submit', agent: 0, priority: 0, runAfter: null, key: null },
        { k: 'claim', agent: 0, max: 1, push: false },
      ],
    };
    // Unplanted agents take the same sequence alike on every path.
    await runScenario(paths, sc, { prefix: 'plain-' });
    const d = await divergenceOf(async () => void (await runScenario(paths, sc, { prefix: 'planted-' })));
    expect([d.at, d.what, d.odd]).toEqual([1, 'answer', 'pg-fast']);
    expect(d.said.sqlite).toEqual({ ok: [] });
    expect(d.said['pg-slow']).toEqual({ ok: [] });
    expect(d.said['pg-fast']).toMatchObject({ ok: [{ id: 'E1', status: 'running' }] });
    expect(d.message).toMatch(/the paths disagree at operation 1: \{ "k": "claim"/);
  });

  it('is caught by the random sequences too', async () => {
    const out = await fc.check(
      fc.asyncProperty(scenarioArb(), async (sc) => void (await runScenario(paths, sc, { prefix: 'planted-' }))),
      { numRuns: 10, seed: 57, endOnFailure: true },
    );
    expect(out.failed).toBe(true);
    const d = out.errorInstance as Divergence;
    expect(d).toBeInstanceOf(Divergence);
    expect([d.scenario.ops[d.at!]!.k, d.odd]).toEqual(['claim', 'pg-fast']);
  }, 120_000);
});
