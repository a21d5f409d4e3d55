/**
 * `baton doctor`'s read-only checks of a PostgreSQL store's own setup (StoreAdapter.missingSetup
 * and settingChecks).
 */
import { sql, type Kysely } from 'kysely';
import type { StoreCheck } from './adapter.ts';
import type { DB } from './schema.ts';

/** The configured schema when it does not exist; found without creating it (migrate would). */
export async function missingSchema(db: Kysely<DB>, schema: string | undefined): Promise<string | undefined> {
  if (!schema) return undefined;
  const found = await sql<{ n: number }>`SELECT count(*) AS n FROM information_schema.schemata WHERE schema_name = ${schema}`.execute(db);
  return Number(found.rows[0]?.n ?? 0) === 0 ? `schema ${schema} does not exist` : undefined;
}

/** The tables whose space prunes free and whose statistics the hot statements' plans come from. */
const VACUUMED_TABLES = ['executions', 'execution_events', 'execution_logs', 'audit_log', 'agents', 'agent_backlog'];

/**
 * PostgreSQL's autovacuum, on for the server and for Baton's tables: it reuses the space pruned
 * rows leave and analyzes the tables, and a connection keeps its statements' plans until then
 * (docs/operations.md, "PostgreSQL: autovacuum").
 */
export async function checkAutovacuum(db: Kysely<DB>): Promise<StoreCheck> {
  const { rows } = await sql<{ autovacuum: string; track_counts: string; off: string[] | null }>`
    SELECT current_setting('autovacuum') AS autovacuum, current_setting('track_counts') AS track_counts,
      (SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relname = ANY (${VACUUMED_TABLES}::text[])
          AND EXISTS (SELECT 1 FROM unnest(c.reloptions) o WHERE lower(o) ~ '^autovacuum_enabled=(false|off|no|0|f|n)$')) AS off`.execute(
    db,
  );
  const r = rows[0]!;
  const off = [
    ...(r.autovacuum === 'on' && r.track_counts === 'on' ? [] : [`autovacuum = ${r.autovacuum}, track_counts = ${r.track_counts}`]),
    ...(r.off?.length ? [`autovacuum_enabled = false on ${r.off.join(', ')}`] : []),
  ];
  if (off.length === 0) return { check: 'autovacuum', status: 'ok', detail: "on for Baton's tables" };
  const why = `PostgreSQL neither analyzes Baton's tables (a connection keeps plans it made on a young store) nor reuses the space prunes free (docs/operations.md, "PostgreSQL: autovacuum")`;
  return { check: 'autovacuum', status: 'warn', detail: `${off.join('; ')}: ${why}` };
}
