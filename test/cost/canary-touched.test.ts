import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCanaryOnce } from '../../src/canary/run.ts';
import { Engine } from '../../src/engine/engine.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';
import { compiledOf, during, planStore, recorded, recordingStore } from './plans-check.ts';

// A canary cycle judges the executions its new events touched on their rows: seven invariants
// (E-03, E-07, G-03, G-04, C-01, C-02, C-03) used to read them by id each for itself, seven
// descents of executions_pkey per execution, whose depth grows with history (at 1,000,000 past
// executions on PostgreSQL 4.3 pages an id and read, about 9 ms of the server's CPU a cycle beside
// 400 touched executions; docs/benchmarks.md). The rows are now read once a cycle for all of them
// (src/canary/touched.ts).

const AGENTS = ['touch-a', 'touch-b', 'touch-c'];
const TASKS = 300;
let ts: TestStore;
let engine: Engine;

beforeAll(async () => {
  ts = await openTestStore();
  planStore(ts);
  engine = new Engine({ store: ts.store, nodeId: 'touched-test' });
  for (const name of AGENTS) await engine.agents.create({ name, max_parallel: 50, max_backlog: 1000 }, 'test');
}, 60_000);
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

/** A statement that reads executions by a list of ids. */
const byIds = (text: string) => /^select\b[\s\S]* from "executions"(?: as "\w+")?[\s\S]* where "(?:\w+"\.")?id" in \(/.test(text);

describe('a canary cycle reads the executions it judges', () => {
  it('once, for every invariant that judges them on their rows', async () => {
    // Caught up first, then new activity: submitted, a third run to completion.
    for (let i = 0; i < 10; i++) if ((await runCanaryOnce({ store: ts.store })).events?.caught_up) break;
    for (let k = 0; k < TASKS; k++) await engine.submit(AGENTS[k % AGENTS.length]!, { message: `t${k}` }, 'test');
    for (let k = 0; k < TASKS / 3; k++) {
      const [row] = await engine.claim(AGENTS[k % AGENTS.length]!, { owner: 'w' });
      await engine.complete(row!.id, row!.lease_token!, { status: 'succeeded', result: { k } }, 'w');
    }
    const start = recorded.length;
    const report = await during('canary cycle', () => runCanaryOnce({ store: recordingStore(ts.store) }));
    expect(report.ok).toBe(true);
    expect(report.open).toBe(0);
    expect(report.events?.read).toBeGreaterThanOrEqual(TASKS);
    const reads = recorded
      .slice(start)
      .map((r) => compiledOf(r))
      .filter((c) => byIds(c.sql));
    // One statement for the TASKS ids (under IDS_PER_QUERY), each id bound once.
    expect(reads.map((c) => c.sql.replace(/\s+/g, ' ').slice(0, 120))).toHaveLength(1);
    expect(new Set(reads[0]!.parameters.filter((v) => typeof v === 'string' && v.startsWith('ex_'))).size).toBe(TASKS);
  }, 120_000);
});
