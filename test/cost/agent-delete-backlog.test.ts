import { CompiledQuery } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_DELETE_CHUNK } from '../../src/engine/agents.ts';
import { Engine } from '../../src/engine/engine.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { compiledOf, during, pastExecution, planStore, recorded, recordingStore, seedStaleHistory } from './plans-check.ts';

// Deleting an agent cancels its backlog in chunks of AGENT_DELETE_CHUNK, each its own transaction
// (src/engine/agents.ts). Each chunk was a statement a row, and one more a row (its subscriptions
// read for chained work, though they went in the first chunk): 200,413 statements for a backlog of
// 100,000 (docs/benchmarks.md, "Deleting an agent with a deep backlog"). Now a chunk is a few
// statements: its agent, its rows, one UPDATE of them. The UPDATE finds its rows through the
// primary key, with statistics analysed before the backlog (30,000 past executions, none queued).

const BACKLOG = AGENT_DELETE_CHUNK * 2 + 3;
const HISTORY = 30_000;
/** Statements a chunk's transaction may send (agent, queue slice, the UPDATE, subscriptions, follow-up reads). */
const PER_TRANSACTION = 8;

let ts: TestStore;
let engine: Engine;
const transactions: number[] = [];

beforeAll(async () => {
  ts = await openTestStore();
  planStore(ts);
  const rec = recordingStore(ts.store);
  const transaction = rec.transaction.bind(rec);
  rec.transaction = (fn) => (transactions.push(recorded.length), transaction(fn));
  engine = new Engine({ store: rec, nodeId: 'agent-delete-backlog' });
  await engine.agents.create({ name: 'adb-history', max_parallel: 3 }, 'seed');
  const now = Date.now();
  await seedStaleHistory(ts.store, HISTORY, (i) =>
    pastExecution(`ex_adb_${String(i).padStart(7, '0')}`, 'adb-history', now - 86_400_000 + i * 1000),
  );
}, 120_000);
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

describe(`deleting an agent with a deep backlog (${STORE_KIND})`, () => {
  it('cancels each chunk in a few statements, each row found through the primary key', async () => {
    await engine.agents.create({ name: 'adb-deep', max_parallel: 1, max_backlog: 100_000 }, 'test');
    for (let i = 0; i < BACKLOG; i += 500)
      await engine.submitMany(
        'adb-deep',
        Array.from({ length: Math.min(500, BACKLOG - i) }, (_, j) => ({ message: `m${i + j}` })),
        'test',
      );
    transactions.length = 0;
    const out = await during('agent delete', () => engine.agents.delete('adb-deep', 'test'));
    expect(out).toEqual({ cancelled: BACKLOG, cancel_requested: 0 });
    const mine = recorded.filter((r) => r.label === 'agent delete');
    // Three chunks (the last one short) and the final transaction.
    expect(transactions).toHaveLength(4);
    expect(mine.length).toBeLessThanOrEqual(transactions.length * PER_TRANSACTION);
    const left = await ts.store.db
      .selectFrom('executions')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('agent', '=', 'adb-deep')
      .where('status', '=', 'cancelled')
      .executeTakeFirstOrThrow();
    expect(Number(left.n)).toBe(BACKLOG);

    const updates = mine.map(compiledOf).filter((c) => /^\s*update "executions"/i.test(c.sql));
    expect(updates.length).toBeGreaterThan(0);
    for (const u of updates) {
      if (ts.store.kind === 'sqlite') {
        const plan = await ts.store.db.executeQuery<{ detail: string }>(
          CompiledQuery.raw(`EXPLAIN QUERY PLAN ${u.sql}`, [...u.parameters]),
        );
        expect(plan.rows.map((r) => r.detail).join('\n')).toMatch(
          /^SEARCH executions USING INDEX sqlite_autoindex_executions_1 \(id=\?\)$/,
        );
        continue;
      }
      const out = await ts.store.db.executeQuery<{ 'QUERY PLAN': string }>(CompiledQuery.raw(`EXPLAIN ${u.sql}`, [...u.parameters]));
      const scans = out.rows.map((r) => r['QUERY PLAN']).filter((l) => /Scan/.test(l));
      expect(scans.length).toBeGreaterThan(0);
      for (const s of scans)
        expect(s).toMatch(
          /Index Scan using executions_pkey on executions|Bitmap Index Scan on executions_pkey|Bitmap Heap Scan on executions/,
        );
    }
  });
});
