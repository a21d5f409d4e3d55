import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { completeManyQuery, type LeasedCompletion } from '../../src/engine/transitions/complete.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, PG_URL, STORE_KIND, type TestStore } from '../helpers/store.ts';

// Completions committed together on PostgreSQL are one UPDATE … FROM unnest (completeManyWithLease,
// src/engine/transitions/complete.ts), a named statement: planned once a connection (five custom
// plans, then the generic one kept until the table is analysed). Its guard written as a plain
// `status IN (…)` with the ids only joined, the plan made on a young store (executions never
// analysed) read executions_status_recent on the two live statuses: every running and queued
// entry of that index, live and dead, for each call's few rows (docs/benchmarks.md, "The shared
// completions' UPDATE read every live row"). A session here plans the statement young, then runs
// it again over a deeper backlog; another plans that earlier form in the same window (so this test
// can fail).

const AGENTS = 10;
const YOUNG = 2_000;
const BACKLOG = 3_000;
const clock = manualClock();
let ts: TestStore;
let engine: Engine;
const names = Array.from({ length: AGENTS }, (_, i) => `cm-plan-${String(i).padStart(2, '0')}`);

/** The statement as it was before: the ids joined only, the guard a plain comparison (bound). */
const BEFORE = `UPDATE executions SET changed_at = v.now
  FROM unnest($1::text[], $2::text[], $3::bigint[]) AS v(id, token, now)
  WHERE executions.id = v.id AND executions.lease_token = v.token AND executions.status IN ($4, $5)
  RETURNING executions.*`;

async function session(): Promise<{ client: pg.Client; notices: string[] }> {
  const client = new pg.Client({ connectionString: PG_URL, options: `-c jit=off -c search_path=${ts.location.schema}` });
  const notices: string[] = [];
  client.on('notice', (n) => notices.push(n.message ?? ''));
  await client.connect();
  await client.query("LOAD 'auto_explain'");
  await client.query('SET auto_explain.log_min_duration = 0');
  await client.query('SET client_min_messages = log');
  return { client, notices };
}

async function submit(n: number) {
  for (let i = 0; i < n; i++) await engine.submit(names[i % AGENTS]!, { message: `m${i}` }, 'test');
}
async function claimAll(max: number): Promise<ExecutionRow[]> {
  const rows: ExecutionRow[] = [];
  for (const name of names) rows.push(...(await engine.claim(name, { owner: 'w', max })));
  return rows;
}

/** The statement run (rolled back) eight times on one connection, as a named statement: the plan of the last run. */
async function planned(
  s: { client: pg.Client; notices: string[] },
  name: string,
  text: string,
  values: unknown[],
  rows: number,
): Promise<string> {
  let plan = '';
  for (let k = 0; k < 8; k++) {
    s.notices.length = 0;
    await s.client.query('BEGIN');
    const r = await s.client.query({ name, text, values });
    await s.client.query('ROLLBACK');
    expect(r.rowCount).toBe(rows);
    plan = s.notices.join('\n');
  }
  return plan;
}

describe.skipIf(STORE_KIND !== 'postgres')('completions committed together, planned on a young store (PostgreSQL)', () => {
  beforeAll(async () => {
    ts = await openTestStore();
    // Young for the whole test: never analysed (the test's own schema).
    await sql`ALTER TABLE executions SET (autovacuum_enabled = off)`.execute(ts.store.db);
    engine = new Engine({ store: ts.store, nodeId: 'cm-plan', clock });
    for (const name of names) await engine.agents.create({ name, max_parallel: 100, max_backlog: 100_000 }, 'test');
    await submit(YOUNG);
    // Tasks run and ended (dead index entries of running rows), and some running now.
    for (let k = 0; k < 10; k++) {
      for (const r of await claimAll(5)) await engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'w');
    }
  });
  afterAll(() => ts.cleanup());

  it('finds the rows it completes through the primary key, whatever the store looked like when the plan was made', async () => {
    const running = await claimAll(2);
    const jobs: LeasedCompletion[] = running.map((r) => ({
      id: r.id,
      token: r.lease_token!,
      outcome: { status: 'succeeded', result: null, usage: null, error: null },
      now: clock(),
      actor: 'w',
    }));
    const now = await session();
    const before = await session();
    try {
      const q = completeManyQuery(ts.store.db, jobs).compile();
      const beforeValues = [jobs.map((j) => j.id), jobs.map((j) => j.token), jobs.map((j) => j.now), 'running', 'queued'];
      // The earlier form, planned in the same window, reads the status index.
      expect(await planned(before, 'before', BEFORE, beforeValues, jobs.length)).toMatch(/Index Scan on executions_status_recent/);
      const young = await planned(now, 'now', q.sql, [...q.parameters], jobs.length);
      expect(young).toMatch(/Index Cond: \(id = ANY/);
      expect(young).not.toMatch(/executions_status_recent|Seq Scan on executions\b/);

      // The plan made young, over a deeper backlog.
      await submit(BACKLOG);
      const s = now;
      s.notices.length = 0;
      await s.client.query('BEGIN');
      await s.client.query({ name: 'now', text: q.sql, values: [...q.parameters] });
      await s.client.query('ROLLBACK');
      const deep = s.notices.join('\n');
      expect(deep).toMatch(/executions_pkey/);
      expect(deep).not.toMatch(/executions_status_recent|Seq Scan on executions\b/);
    } finally {
      await now.client.end();
      await before.client.end();
    }
  });
});
