import { CompiledQuery, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { completeManyWithLease, completeWithLease, type LeasedCompletion } from '../../src/engine/transitions/complete.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import type { NewExecution } from '../../src/store/schema.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { compiledOf, during, planStore, recorded, recordingStore, seedStaleHistory } from './plans-check.ts';

// Completions asked for together share a transaction (src/engine/completion-commit.ts,
// commitTogether); on PostgreSQL their compare-and-sets are one UPDATE … FROM unnest
// (completeManyWithLease), planned for each call with the statistics of the day. Analysed when
// no row was live (an old store's normal case: autovacuum analyses executions after a tenth of
// it changed, so a backlog of 100,000 over 1,000,000 past executions is planned as if the queue
// were empty), PostgreSQL estimated one row for `status IN ('running', 'queued')`, read every
// live row through executions_status_recent and joined the given ids to them: at 1M with
// 100,000 queued, every queued row read per batch of completions (docs/benchmarks.md, "Claims and
// completions at 1M"). Here the store is analysed with 30,000 past executions and none live, then
// 3,000 tasks are queued (autovacuum off for the table), three are claimed and completed together,
// and the statement's plan is read as it ran. On SQLite each completion is completeWithLease's
// own statement: it seeks the primary key, with statistics and without.

const HISTORY = 30_000;
const BACKLOG = 3_000;
const AGENT = 'cps-deep';
/** Pages the scan finding three rows may read: three descents of executions_pkey and the rows (writing them, every index's new entries, comes on top). */
const MOST_PAGES = 20;

let ts: TestStore;
let store: StoreAdapter;
let engine: Engine;
const now = Date.now();

function historyRow(i: number): NewExecution {
  const created = now - 30 * 86_400_000 + i * 60_000;
  return {
    id: `ex_cps_${String(i).padStart(7, '0')}`,
    agent: AGENT,
    trigger_kind: 'api',
    origin: '{}',
    message: `history task ${i}`,
    payload: JSON.stringify({ n: i }),
    priority: 0,
    status: i % 20 === 0 ? 'failed' : 'succeeded',
    attempt: 1,
    max_redeliveries: 3,
    timeout_seconds: 600,
    lease_ttl_seconds: 30,
    lease_owner: 'w',
    lease_token: `tok_${i}`,
    heartbeat_at: created + 1000,
    created_at: created,
    queued_at: created,
    started_at: created + 1000,
    completed_at: created + 5000,
    duration_ms: 4000,
    changed_at: created + 5000,
    changed_by: 'seed',
    change_reason: 'succeeded',
  } as NewExecution;
}

beforeAll(async () => {
  ts = await openTestStore();
  store = ts.store;
  planStore(ts);
  engine = new Engine({ store, nodeId: 'completions-plan-stale', clock: () => now });
  await engine.agents.create({ name: AGENT, max_parallel: 8, max_backlog: 1_000_000 }, 'seed');
  await seedStaleHistory(store, HISTORY, historyRow);
  for (let i = 0; i < BACKLOG; i += 1000)
    await engine.submitMany(
      AGENT,
      Array.from({ length: 1000 }, (_, j) => ({ message: `deep ${i + j}` })),
      'seed',
    );
}, 120_000);
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

interface PgNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Join Filter'?: number;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  Plans?: PgNode[];
}

class Rollback extends Error {}

describe(`completions together beside a backlog the statistics have not seen (${STORE_KIND})`, () => {
  it('each compare-and-set finds its row through the primary key, however many rows are live', async () => {
    const claimed = await engine.claim(AGENT, { owner: 'w', max: 3 });
    expect(claimed).toHaveLength(3);
    const jobs: LeasedCompletion[] = claimed.map((r) => ({
      id: r.id,
      token: r.lease_token!,
      outcome: { status: 'succeeded', result: '{"ok":true}', error: null, usage: null },
      now,
      actor: 'w',
    }));
    // As commitTogether runs them, recorded, then rolled back: the rows stay running for the replay.
    const rec = recordingStore(store);
    let done = 0;
    await during('complete together', () =>
      rec
        .transaction(async (tx) => {
          if (store.kind === 'postgres') done = (await completeManyWithLease(tx, jobs)).size;
          else for (const j of jobs) done += (await completeWithLease(tx, j.id, j.token, j.outcome, j.now, j.actor)) ? 1 : 0;
          throw new Rollback();
        })
        .catch((err) => {
          if (!(err instanceof Rollback)) throw err;
        }),
    );
    expect(done).toBe(3);
    const updates = recorded.filter((r) => r.label === 'complete together').map(compiledOf);
    expect(updates.length).toBeGreaterThan(0);

    if (store.kind === 'sqlite') {
      for (const fresh of [false, true]) {
        if (fresh) {
          await sql`DROP TABLE sqlite_stat1`.execute(store.db);
          await sql`DROP TABLE IF EXISTS sqlite_stat4`.execute(store.db);
        }
        for (const u of updates) {
          const plan = await store.db.executeQuery<{ detail: string }>(CompiledQuery.raw(`EXPLAIN QUERY PLAN ${u.sql}`, [...u.parameters]));
          expect(plan.rows.map((r) => r.detail).join('\n')).toMatch(
            /^SEARCH executions USING INDEX sqlite_autoindex_executions_1 \(id=\?\)$/,
          );
        }
      }
      return;
    }
    expect(updates).toHaveLength(1);
    const u = updates[0]!;
    const root = await store.db.connection().execute(async (conn) => {
      await conn.executeQuery(CompiledQuery.raw('BEGIN'));
      try {
        const out = await conn.executeQuery<{ 'QUERY PLAN': Array<{ Plan: PgNode }> }>(
          CompiledQuery.raw(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${u.sql}`, [...u.parameters]),
        );
        return out.rows[0]!['QUERY PLAN'][0]!.Plan;
      } finally {
        await conn.executeQuery(CompiledQuery.raw('ROLLBACK'));
      }
    });
    const scans: string[] = [];
    let touched = 0;
    let pages = 0;
    const walk = (n: PgNode) => {
      if (/Scan/.test(n['Node Type']) && (n['Relation Name'] === 'executions' || /^executions_/.test(n['Index Name'] ?? ''))) {
        scans.push(`${n['Node Type']} ${n['Index Name'] ?? n['Relation Name']}`);
        touched += (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0)) * n['Actual Loops'];
        pages += n['Shared Hit Blocks'] + n['Shared Read Blocks'];
      }
      (n.Plans ?? []).forEach(walk);
    };
    walk(root);
    expect(scans).toEqual(['Index Scan executions_pkey']);
    expect(touched).toBeLessThanOrEqual(3);
    expect(pages).toBeLessThanOrEqual(MOST_PAGES);
  });
});
