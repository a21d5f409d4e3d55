import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, PG_URL, STORE_KIND, type TestStore } from '../helpers/store.ts';

// baton_take_rows (a gathered admission's takes, src/store/postgres-fast-paths.ts) updates each
// row it takes by id, a statement PostgreSQL plans once a connection and keeps until the table is
// analysed. Planned on a young store (executions never analysed, its partial index of queued rows
// one page), `id = … AND status = 'queued'` read executions_admission, whose predicate is that
// status and whose last column is id: every take then read every queued row of every agent, for
// the rest of the connection's life (docs/benchmarks.md, "A take plan made young"). A connection
// here plans its takes young, then takes from a deeper backlog; another plans them in the same
// window with the function of migration 0107 put back (rolled back), which shows the window
// still traps the planner (so this test can fail).

const AGENTS = 10;
/** Queued rows when the plans are made (two an agent: each take takes them all). */
const YOUNG = 20;
const BACKLOG = 2_000;
const clock = manualClock();
let ts: TestStore;
let engine: Engine;
const names = Array.from({ length: AGENTS }, (_, i) => `take-young-${String(i).padStart(2, '0')}`);

/** baton_take_rows as migration 0107 made it: the guard a plain comparison. */
const TAKE_ROWS_0107 = `CREATE OR REPLACE FUNCTION baton_take_rows(p_id text[], p_token text[], p_owner text, p_now bigint)
RETURNS SETOF executions LANGUAGE plpgsql AS $$
DECLARE
  r executions;
BEGIN
  FOR i IN 1 .. coalesce(array_length(p_id, 1), 0) LOOP
    UPDATE executions x SET
      status = 'running', attempt = x.attempt + 1, lease_owner = p_owner, lease_token = p_token[i],
      lease_expires_at = p_now + x.lease_ttl_seconds * 1000, heartbeat_at = p_now, started_at = p_now,
      deadline_at = p_now + x.timeout_seconds * 1000,
      changed_at = p_now, changed_by = p_owner, change_reason = 'admitted'
    WHERE x.id = p_id[i] AND x.status = 'queued'
    RETURNING x.* INTO r;
    IF FOUND THEN
      RETURN NEXT r;
    END IF;
  END LOOP;
END
$$`;

async function session(): Promise<{ client: pg.Client; notices: string[] }> {
  const client = new pg.Client({ connectionString: PG_URL, options: `-c jit=off -c search_path=${ts.location.schema}` });
  const notices: string[] = [];
  client.on('notice', (n) => notices.push(n.message ?? ''));
  await client.connect();
  return { client, notices };
}

/** Three queued rows of each agent taken, as admitWrites takes them, rolled back (to a savepoint inside a transaction). */
async function takeAll(client: pg.Client, inTransaction: boolean): Promise<number> {
  const taken: string[] = [];
  for (const name of names) {
    const { rows } = await client.query<{ id: string }>(
      `SELECT id FROM executions WHERE status = 'queued' AND agent = $1 ORDER BY id LIMIT 3`,
      [name],
    );
    taken.push(...rows.map((r) => r.id));
  }
  await client.query(inTransaction ? 'SAVEPOINT take' : 'BEGIN');
  const { rowCount } = await client.query(`SELECT t.id FROM baton_take_rows($1::text[], $2::text[], 'w', $3::bigint) t`, [
    taken,
    taken.map((_, i) => `young-${i}`),
    clock(),
  ]);
  await client.query(inTransaction ? 'ROLLBACK TO SAVEPOINT take' : 'ROLLBACK');
  return rowCount ?? 0;
}

/** Takes made young: the function's UPDATE planned (five custom plans, then the generic one kept). */
async function planYoung(client: pg.Client, inTransaction = false): Promise<void> {
  for (let k = 0; k < 8; k++) expect(await takeAll(client, inTransaction)).toBe(YOUNG);
}

/** The index each UPDATE of one take (rolled back) read, as auto_explain reports it. */
async function takeIndexes(s: { client: pg.Client; notices: string[] }, inTransaction = false): Promise<string[]> {
  await s.client.query("LOAD 'auto_explain'");
  await s.client.query('SET auto_explain.log_min_duration = 0');
  await s.client.query('SET auto_explain.log_nested_statements = on');
  await s.client.query('SET client_min_messages = log');
  s.notices.length = 0;
  await takeAll(s.client, inTransaction);
  return s.notices
    .filter((n) => n.includes("change_reason = 'admitted'"))
    .map((n) => /Scan using (\w+) on executions x\b/.exec(n)?.[1] ?? `no index scan:\n${n}`);
}

async function submit(n: number) {
  for (let i = 0; i < n; i++) await engine.submit(names[i % AGENTS]!, { message: `m${i}` }, 'test');
}

describe.skipIf(STORE_KIND !== 'postgres')('take plans made on a young store (PostgreSQL)', () => {
  beforeAll(async () => {
    ts = await openTestStore();
    engine = new Engine({ store: ts.store, nodeId: 'take-young-test', clock });
    for (const name of names) await engine.agents.create({ name, max_parallel: 3, max_backlog: 100_000 }, 'test');
    await submit(YOUNG);
  });
  afterAll(() => ts.cleanup());

  it('finds each row it takes through the primary key, whatever the store looked like when the plan was made', async () => {
    const kept = await session();
    const trapped = await session();
    try {
      await planYoung(kept.client);
      // The same window with the function of 0107 (CREATE OR REPLACE is transactional: rolled
      // back, it never reaches another session), read at once while the store is still young.
      await trapped.client.query('BEGIN');
      await trapped.client.query(TAKE_ROWS_0107);
      await planYoung(trapped.client, true);
      expect(new Set(await takeIndexes(trapped, true))).toEqual(new Set(['executions_admission']));
      await trapped.client.query('ROLLBACK');

      // The plan made young, on a deeper backlog.
      await submit(BACKLOG);
      const keptPlans = await takeIndexes(kept);
      expect(keptPlans).toHaveLength(AGENTS * 3);
      expect(new Set(keptPlans)).toEqual(new Set(['executions_pkey']));
    } finally {
      await kept.client.end();
      await trapped.client.end();
    }
  });
});
