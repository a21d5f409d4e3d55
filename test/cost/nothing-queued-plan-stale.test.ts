import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { compiledOf, during, nestedPlans, pastExecution, planStore, recorded, recordingStore, seedStaleHistory } from './plans-check.ts';

// A claim that takes no candidate asks whether its agent has any queued row at all (PostgreSQL:
// baton_claim_many's claim_state 'empty', baton_lock_agent's `queued`). Written as EXISTS over
// `agent = … AND status = 'queued'`, with statistics analysed before a backlog and
// executions_admission grown with it, PostgreSQL read it as a range of executions_status_recent on
// status = 'queued' filtered by agent: every queued row of every agent, for each agent a look
// found nothing for (at 1,000,000 executions and 100,000 queued: 26,000 pages and 370 ms an
// agent; docs/benchmarks.md, "Claims and completions at 1M"). Migration 0118 asks for the first
// row in executions_admission's order instead. Here the store is analysed with 30,000 past
// executions and none queued, then BACKLOG tasks are queued on one agent (autovacuum off for the
// table), and claims of an agent with nothing queued (plain, and pooled: baton_lock_agents) are
// planned as a connection keeps them (custom and generic). SQLite reads the agent's counters.

const HISTORY = 30_000;
const BACKLOG = 20_000;

let ts: TestStore;
let engine: Engine;

beforeAll(async () => {
  ts = await openTestStore();
  planStore(ts);
  if (ts.store.kind !== 'postgres') return;
  engine = new Engine({ store: recordingStore(ts.store), nodeId: 'nothing-queued-stale' });
  await engine.pools.create({ name: 'nq-pool', max_parallel: 4 }, 'seed');
  await engine.agents.create({ name: 'nq-deep', max_parallel: 3, max_backlog: 1_000_000 }, 'seed');
  await engine.agents.create({ name: 'nq-idle', max_parallel: 3 }, 'seed');
  await engine.agents.create({ name: 'nq-pooled', max_parallel: 3, pools: ['nq-pool'] }, 'seed');
  const now = Date.now();
  const agents = ['nq-deep', 'nq-idle', 'nq-pooled'];
  await seedStaleHistory(ts.store, HISTORY, (i) =>
    pastExecution(`ex_nq_${String(i).padStart(7, '0')}`, agents[i % 3]!, now - 86_400_000 + i * 1000),
  );
  for (let i = 0; i < BACKLOG; i += 1000)
    await engine.submitMany(
      'nq-deep',
      Array.from({ length: 1000 }, (_, j) => ({ message: `deep ${i + j}` })),
      'seed',
    );
}, 180_000);
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

describe.skipIf(STORE_KIND !== 'postgres')(
  'a claim that finds nothing queued, beside a backlog the statistics have not seen (PostgreSQL)',
  () => {
    it("asks for the agent's first entry of executions_admission, never every queued row by status", async () => {
      expect(await during('claim nothing queued', () => engine.claim('nq-idle', { owner: 'w', max: 3 }))).toEqual([]);
      expect(await during('pooled claim nothing queued', () => engine.claim('nq-pooled', { owner: 'w', max: 3 }))).toEqual([]);
      const checks: Array<[string, RegExp, RegExp]> = [
        ['claim nothing queued', /baton_claim_many\(/, /claim_state := CASE/],
        ['pooled claim nothing queued', /baton_lock_agents?\(/, /queued := /],
      ];
      for (const [label, call, asked] of checks) {
        const c = recorded
          .filter((r) => r.label === label)
          .map(compiledOf)
          .find((q) => call.test(q.sql));
        expect(c, `${label} called ${call}`).toBeDefined();
        for (const generic of [false, true]) {
          const plans = (await nestedPlans(c!.sql, c!.parameters, generic)).split('Query Text:');
          const read = plans.find((p) => asked.test(p));
          expect(read, `auto_explain reported ${asked} (${label}, ${generic ? 'generic' : 'custom'})`).toBeDefined();
          expect(read).toMatch(/Index (Only )?Scan using executions_admission on executions e\b/);
          expect(read).not.toMatch(/executions_status_recent/);
        }
      }
    });
  },
);
