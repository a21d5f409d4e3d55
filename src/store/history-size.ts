/**
 * How big history is, without a full scan (StoreAdapter historySize), one implementation per
 * dialect. Row counts are the database's own estimates: PostgreSQL's pg_class.reltuples, else the
 * statistics collector's live-row count; SQLite's rowid span, max - min + 1, exact for
 * append-mostly tables pruned from the oldest end. Sizes come from the catalogue.
 */
import { sql, type Kysely } from 'kysely';
import type { DB } from './schema.ts';

export interface HistorySize<T extends string> {
  /** Estimated rows per table; null when the database has no estimate yet. */
  rows: Record<T, number | null>;
  /** How the row counts were estimated. */
  rows_estimate: 'reltuples' | 'rowid_span';
  /** Bytes the database takes: SQLite file pages (incl. free ones); PostgreSQL, the schema's tables with indexes and TOAST. */
  bytes: number;
  /** SQLite: bytes in free pages, reusable and returned by incremental vacuum; PostgreSQL: null. */
  free_bytes: number | null;
}

const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

export async function historySizePostgres<T extends string>(db: Kysely<DB>, tables: readonly T[]): Promise<HistorySize<T>> {
  const rows = {} as Record<T, number | null>;
  let bytes = 0;
  const r = await sql<{ relname: string; est: number | null; bytes: number }>`
    SELECT c.relname, coalesce(nullif(c.reltuples, -1)::bigint, s.n_live_tup) AS est, pg_total_relation_size(c.oid) AS bytes
    FROM pg_class c
    LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
    WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'`.execute(db);
  for (const t of r.rows) {
    bytes += Number(t.bytes);
    if ((tables as readonly string[]).includes(t.relname)) rows[t.relname as T] = num(t.est);
  }
  for (const t of tables) rows[t] ??= null;
  return { rows, rows_estimate: 'reltuples', bytes, free_bytes: null };
}

export async function historySizeSqlite<T extends string>(db: Kysely<DB>, tables: readonly T[]): Promise<HistorySize<T>> {
  const rows = {} as Record<T, number | null>;
  const pragma = async (name: string) => Number(Object.values((await sql.raw(`PRAGMA ${name}`).execute(db)).rows[0] as object)[0]);
  const pageSize = await pragma('page_size');
  const bytes = (await pragma('page_count')) * pageSize;
  const free = (await pragma('freelist_count')) * pageSize;
  for (const t of tables) {
    // min() and max() of the rowid are one B-tree seek each, but only as separate statements:
    // SQLite's min/max optimisation skips a query with both (it scanned the whole table).
    const r = await sql<{
      lo: number | null;
      hi: number | null;
    }>`SELECT (SELECT min(rowid) FROM ${sql.table(t)}) AS lo, (SELECT max(rowid) FROM ${sql.table(t)}) AS hi`.execute(db);
    const { lo, hi } = r.rows[0] ?? { lo: null, hi: null };
    rows[t] = lo === null || hi === null ? 0 : Number(hi) - Number(lo) + 1;
  }
  return { rows, rows_estimate: 'rowid_span', bytes, free_bytes: free };
}
