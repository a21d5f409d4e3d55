/**
 * The database itself refuses values outside the domain of the hot tables' columns, whoever
 * writes them, on both stores: a new row and a changed one alike. On PostgreSQL these rules live
 * in domains, which cost a statement nothing unless it sets the column; a table
 * CHECK is re-read at the start of every statement on its table, which is why the hot tables keep
 * only the one that spans several columns.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock: manualClock(), nodeId: 'constraints' });
  await engine.agents.create({ name: 'held', max_parallel: 2 }, 'test');
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

/** A write the database must refuse with a check violation. */
async function refused(write: () => Promise<unknown>): Promise<void> {
  const error = await write().then(
    () => null,
    (e: unknown) => e as { code?: string; message?: string },
  );
  expect(error, 'the write went through').not.toBeNull();
  expect(error!.code).toBe(STORE_KIND === 'postgres' ? '23514' : 'SQLITE_CONSTRAINT_CHECK');
}

const AGENT_VALUES: [string, unknown][] = [
  ['max_parallel', -1],
  ['max_backlog', -1],
  ['timeout_seconds', 0],
  ['lease_ttl_seconds', 0],
  ['max_redeliveries', -1],
  ['delivery', 'carrier-pigeon'],
  ['breaker_state', 'ajar'],
];

describe(`bulk inserts (${STORE_KIND})`, () => {
  it('store a lone surrogate as U+FFFD, as a single insert does, instead of failing the statement', async () => {
    // PostgreSQL's insertMany sends one JSON value; JSON.stringify writes a lone surrogate as \ud800, which its parser refuses.
    const detail = `rendered from a worker's JSON: \ud800 and \udc00`;
    await ts.store.transaction((tx) =>
      ts.store.insertMany(tx, 'audit_log', [{ at: 1, actor: 'test', action: 'test.surrogate', subject: 's', execution_id: null, detail }]),
    );
    const row = await ts.store.db.selectFrom('audit_log').select('detail').where('action', '=', 'test.surrogate').executeTakeFirstOrThrow();
    // PostgreSQL: one U+FFFD each (as its driver writes a plain parameter); SQLite's driver writes three.
    const wellFormed = (x: string) => (x as string & { toWellFormed(): string }).toWellFormed();
    expect(wellFormed(row.detail!)).toBe(row.detail);
    if (STORE_KIND === 'postgres') expect(row.detail).toBe(wellFormed(detail));
  });
});

describe(`the database refuses out-of-domain values (${STORE_KIND})`, () => {
  it.each(AGENT_VALUES)('agents.%s = %j, changed or new', async (column, value) => {
    const db = ts.store.db;
    await refused(() =>
      db
        .updateTable('agents')
        .set({ [column]: value })
        .where('name', '=', 'held')
        .execute(),
    );
    const row = await db.selectFrom('agents').selectAll().where('name', '=', 'held').executeTakeFirstOrThrow();
    expect(row[column as keyof typeof row]).not.toEqual(value);
    await refused(() =>
      db
        .insertInto('agents')
        .values({ ...row, name: `copy-${column}`, [column]: value })
        .execute(),
    );
    expect(await db.selectFrom('agents').select('name').where('name', '=', `copy-${column}`).execute()).toEqual([]);
  });

  it.each([
    ['status', 'lost'],
    ['trigger_kind', 'telepathy'],
  ])('executions.%s = %j, changed or new', async (column, value) => {
    const db = ts.store.db;
    const { id } = await engine.submit('held', { message: 'm', payload: {} }, 'test');
    await refused(() =>
      db
        .updateTable('executions')
        .set({ [column]: value })
        .where('id', '=', id)
        .execute(),
    );
    const row = await db.selectFrom('executions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    expect(row[column as keyof typeof row]).not.toEqual(value);
    await refused(() =>
      db
        .insertInto('executions')
        .values({ ...row, id: `${id}x`, [column]: value })
        .execute(),
    );
    expect(await db.selectFrom('executions').select('id').where('id', '=', `${id}x`).execute()).toEqual([]);
  });

  it('a running execution without a lease (running_has_lease)', async () => {
    const { id } = await engine.submit('held', { message: 'm', payload: {} }, 'test');
    await refused(() => ts.store.db.updateTable('executions').set({ status: 'running' }).where('id', '=', id).execute());
  });

  it.runIf(STORE_KIND === 'postgres')('keeps single-column rules of the hot tables in domains, not table checks', async () => {
    const { rows } = await sql<{ table: string; name: string }>`
      SELECT t.relname AS table, k.conname AS name FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid
      WHERE t.relnamespace = current_schema()::regnamespace AND t.relname IN ('agents', 'executions') AND k.contype = 'c'
      ORDER BY 1, 2`.execute(ts.store.db);
    expect(rows).toEqual([{ table: 'executions', name: 'running_has_lease' }]);
  });
});
