import { sql } from 'kysely';
import type { StoreKind, Tx } from '../store/adapter.ts';

/**
 * Columns of `table` in the current schema, or an empty set if it does not exist. Some checks
 * read tables other migrations add (schedules, execution_logs); they ask first, because a failed
 * query would abort the whole PostgreSQL snapshot. The catalog query is the only dialect
 * difference the canary has, so it lives here rather than in the shared adapter.
 */
export async function columnsOf(tx: Tx, kind: StoreKind, table: string): Promise<Set<string>> {
  const rows =
    kind === 'postgres'
      ? await sql<{ name: string }>`SELECT column_name AS name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ${table}`.execute(tx)
      : await sql<{ name: string }>`SELECT name FROM pragma_table_info(${table})`.execute(tx);
  return new Set(rows.rows.map((r) => r.name));
}

/** undefined when every column is there; otherwise why the check is skipped. */
export async function missingColumns(tx: Tx, kind: StoreKind, table: string, needed: string[]): Promise<string | undefined> {
  const have = await columnsOf(tx, kind, table);
  if (have.size === 0) return `table ${table} does not exist yet`;
  const missing = needed.filter((c) => !have.has(c));
  return missing.length ? `table ${table} lacks ${missing.join(', ')}` : undefined;
}
