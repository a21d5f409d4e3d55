import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

// PostgreSQL's json_valid (the canary's E-04 reads it over every queued row) catches a failed
// cast in an exception block, a subtransaction, which a parallel plan refuses: a read over a deep
// backlog with analysed statistics went parallel and failed the canary's snapshot. The function is
// parallel unsafe, so no plan that calls it is parallel, and under a forced parallel plan it still answers.

let ts: TestStore;
beforeAll(async () => {
  ts = await openTestStore();
});
afterAll(async () => {
  await ts?.cleanup();
});

describe(`json_valid in no parallel plan (${STORE_KIND})`, () => {
  it('answers under a forced parallel plan (PostgreSQL: parallel unsafe)', async () => {
    const { store } = ts;
    const read = (db: typeof store.db) =>
      sql<{
        bad: number;
        ok: number;
      }>`SELECT min(json_valid(v.t)) AS bad, max(json_valid(v.t)) AS ok FROM (SELECT 'not json' AS t UNION ALL SELECT '{}') AS v`.execute(
        db,
      );
    if (store.kind !== 'postgres') {
      expect((await read(store.db)).rows[0]).toEqual({ bad: 0, ok: 1 });
      return;
    }
    const { rows } = await sql<{ p: string }>`SELECT proparallel AS p FROM pg_proc
      WHERE proname = 'json_valid' AND pronamespace = current_schema()::regnamespace`.execute(store.db);
    expect(rows).toEqual([{ p: 'u' }]);
    const forced = (
      await sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_settings WHERE name = 'debug_parallel_query'`.execute(store.db)
    ).rows[0]!.n
      ? 'debug_parallel_query'
      : 'force_parallel_mode';
    const out = await store.db.transaction().execute(async (tx) => {
      await sql.raw(`SET LOCAL ${forced} = on`).execute(tx);
      return read(tx);
    });
    expect(out.rows[0]).toEqual({ bad: 0, ok: 1 });
  });
});
