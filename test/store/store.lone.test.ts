import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestStore, PG_URL, STORE_KIND, type TestStore } from '../helpers/store.ts';

// The common claim, submit and completion run on PostgreSQL as one statement outside a
// transaction (store.fastPaths). A deadlock with another transaction — a claim meeting an
// agent's deletion — ends such a statement as it ends a transaction, with every write undone:
// store.lone runs it again, as store.transaction does. Before, the claim answered 500.

let ts: TestStore;

beforeAll(async () => {
  ts = await openTestStore();
});
afterAll(async () => {
  await ts.cleanup();
});

describe.skipIf(STORE_KIND !== 'postgres')('one statement outside a transaction (PostgreSQL)', () => {
  it('a statement the database ends in a deadlock is run again, and its writes land once', async () => {
    const db = ts.store.db;
    await sql`CREATE TABLE lone_rows (id int PRIMARY KEY, v int NOT NULL)`.execute(db);
    await sql`INSERT INTO lone_rows VALUES (1, 0), (2, 0)`.execute(db);
    // One statement that takes row 2, then row 1.
    await sql`CREATE FUNCTION lone_both() RETURNS void LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE lone_rows SET v = v + 1 WHERE id = 2;
        UPDATE lone_rows SET v = v + 1 WHERE id = 1;
      END $$`.execute(db);

    const other = new pg.Client({ connectionString: PG_URL, options: `-c search_path=${ts.location.schema}` });
    await other.connect();
    try {
      // Another transaction holds row 1 ...
      await other.query('BEGIN');
      await other.query('UPDATE lone_rows SET v = v + 10 WHERE id = 1');
      let attempts = 0;
      const lone = ts.store.lone(async () => {
        attempts++;
        await sql`SELECT lone_both()`.execute(db);
      });
      // ... the statement takes row 2 and waits for row 1; the transaction then waits for row 2.
      await new Promise((r) => setTimeout(r, 300));
      // The statement waited first, so its deadlock check (deadlock_timeout, 1 s) runs first and
      // ends it: row 2 is free again, and the transaction goes on and commits.
      await other.query('UPDATE lone_rows SET v = v + 10 WHERE id = 2');
      await other.query('COMMIT');
      await lone;
      expect(attempts).toBe(2);
      const { rows } = await sql<{ id: number; v: number }>`SELECT id, v FROM lone_rows ORDER BY id`.execute(db);
      expect(rows).toEqual([
        { id: 1, v: 11 },
        { id: 2, v: 11 },
      ]);
    } finally {
      await other.end();
    }
  });

  it('any other error is not run again', async () => {
    let attempts = 0;
    const failed = ts.store.lone(async () => {
      attempts++;
      await sql`SELECT 1 / 0`.execute(ts.store.db);
    });
    await expect(failed).rejects.toMatchObject({ code: '22012' });
    expect(attempts).toBe(1);
  });
});
