import fc from 'fast-check';
import { afterAll, beforeAll, it } from 'vitest';
import { describeEveryStore, openPaths, runScenario, scenarioArb, type Paths } from './helpers/differential.ts';

// Differential test: random agent configurations and operation sequences run on SQLite, on
// PostgreSQL with its fast paths (the lone claim, submit and completion statements, which decide
// in SQL when the TypeScript transaction may be skipped) and on PostgreSQL with them off. Every
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
      fc.asyncProperty(scenarioArb(), (sc) => runScenario(paths, sc)),
      {
        numRuns: Number(process.env.BATON_DIFF_RUNS ?? 15),
        seed: Number(process.env.BATON_DIFF_SEED ?? 57),
        endOnFailure: process.env.BATON_DIFF_SHRINK === '0',
        interruptAfterTimeLimit: 240_000,
        markInterruptAsFailure: true,
      },
    );
  }, 300_000);
});
