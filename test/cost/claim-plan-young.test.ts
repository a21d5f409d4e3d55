import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, PG_URL, STORE_KIND, type TestStore } from '../helpers/store.ts';

// PostgreSQL keeps one generic plan per statement of baton_claim_many per connection, made once
// and kept until the table is analysed. Made on a store without statistics while its queued rows
// had split executions_admission's first page but not executions_status_recent's, that plan read
// every queued row of every agent once per agent claimed, sorted, for the rest of the connection's
// life: docs/benchmarks.md, "A claim plan made young". A setting on the function leaves the planner no sorting plan
// inside the function. A connection here plans its claims in that window, then claims from a
// deeper backlog; another plans them in the same window with the setting taken back (rolled
// back), which shows the window still traps the planner (so this test can fail).

const AGENTS = 20;
/** Queued rows when the plans are made: past executions_admission's first page, within status_recent's. */
const YOUNG = 110;
const BACKLOG = 2_000;
const CLAIM_MANY_ARGS = 'TEXT[], TEXT[], TEXT[], INTEGER[], TEXT[], INTEGER[], BIGINT[], BIGINT, BIGINT[], TEXT[]';
const clock = manualClock();
let ts: TestStore;
let engine: Engine;
// Long names (as a deployment's may be): they fill admission's pages before status_recent's.
const names = Array.from({ length: AGENTS }, (_, i) => `a-team-of-agents-with-rather-long-names-${String(i).padStart(3, '0')}`);

async function session(): Promise<{ client: pg.Client; notices: string[] }> {
  const client = new pg.Client({ connectionString: PG_URL, options: `-c jit=off -c search_path=${ts.location.schema}` });
  const notices: string[] = [];
  client.on('notice', (n) => notices.push(n.message ?? ''));
  await client.connect();
  return { client, notices };
}

let token = 0;
/** One claim of every agent, as the store's claimMany calls it (src/store/postgres-fast-paths.ts). */
function claimAll(client: pg.Client) {
  const from: number[] = [];
  const tokens: string[] = [];
  for (let i = 0; i < names.length; i++) {
    from.push(tokens.length + 1);
    for (let k = 0; k < 3; k++) tokens.push(`young-${token++}`);
  }
  const now = clock();
  return client.query(
    `SELECT f.claim_agent, f.claim_state FROM baton_claim_many($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[], $7::bigint[], $8::bigint, $9::bigint[], $10::text[]) f`,
    [
      names,
      names.map(() => 'pull'),
      names.map(() => 'w'),
      names.map(() => 3),
      tokens,
      from,
      names.map(() => now),
      1_000,
      names.map(() => 1 << 20),
      names.map(() => null),
    ],
  );
}

/** Claims made young: the function's statements planned (five custom plans, then the generic one kept). */
async function planYoung(client: pg.Client): Promise<void> {
  for (let k = 0; k < 8; k++) await claimAll(client);
}

/** The index each candidate scan of one claim (rolled back) read, as auto_explain reports it. */
async function candidateIndexes(s: { client: pg.Client; notices: string[] }, inTransaction = false): Promise<string[]> {
  await s.client.query("LOAD 'auto_explain'");
  await s.client.query('SET auto_explain.log_min_duration = 0');
  await s.client.query('SET auto_explain.log_nested_statements = on');
  await s.client.query('SET client_min_messages = log');
  s.notices.length = 0;
  await s.client.query(inTransaction ? 'SAVEPOINT claim' : 'BEGIN');
  await claimAll(s.client);
  await s.client.query(inTransaction ? 'ROLLBACK TO SAVEPOINT claim' : 'ROLLBACK');
  return s.notices
    .filter((n) => n.includes('array_agg(c.place'))
    .map((n) => /Scan using (\w+) on executions e\b/.exec(n)?.[1] ?? `no index scan:\n${n}`);
}

async function submit(n: number, input: { priority: number; run_after: number | null }) {
  for (let i = 0; i < n; i++) await engine.submit(names[i % AGENTS]!, { message: `m${i}`, ...input }, 'test');
}

describe.skipIf(STORE_KIND !== 'postgres')('claim plans made on a young store (PostgreSQL)', () => {
  beforeAll(async () => {
    ts = await openTestStore();
    engine = new Engine({ store: ts.store, nodeId: 'young-plan-test', clock });
    for (const name of names) await engine.agents.create({ name, max_parallel: 3, max_backlog: 100_000 }, 'test');
    // Queued but not yet due (and last in line), so the young claims take nothing and every
    // claim runs its candidate scan.
    await submit(YOUNG, { priority: 9, run_after: clock() + 86_400_000 });
  });
  afterAll(() => ts.cleanup());

  it('reads candidates through executions_admission, whatever the store looked like when the plan was made', async () => {
    const kept = await session();
    const trapped = await session();
    try {
      await planYoung(kept.client);
      // The same window without the function's setting (ALTER FUNCTION is transactional: rolled
      // back, it never reaches another session) plans the walk of every queued row. Read at once,
      // while the store is still young: another session's DDL (a test file migrating its schema)
      // can make this one plan again, and a plan made again later would not be this one.
      await trapped.client.query('BEGIN');
      await trapped.client.query(`ALTER FUNCTION baton_claim_many(${CLAIM_MANY_ARGS}) RESET enable_sort`);
      await planYoung(trapped.client);
      expect(new Set(await candidateIndexes(trapped, true))).toEqual(new Set(['executions_status_recent']));
      await trapped.client.query('ROLLBACK');

      // The plans made young, with the setting, on a deeper backlog.
      await submit(BACKLOG, { priority: 0, run_after: null });
      const keptPlans = await candidateIndexes(kept);
      expect(keptPlans).toHaveLength(AGENTS);
      expect(new Set(keptPlans)).toEqual(new Set(['executions_admission']));
    } finally {
      await kept.client.end();
      await trapped.client.end();
    }
  });
});
