import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { openSqlite } from '../../src/store/sqlite.ts';
import { schemaFacts } from '../helpers/schema-facts.ts';
import { PG_URL, STORE_KIND } from '../helpers/store.ts';

/**
 * What one dialect's migrated schema has and the other's does not, on purpose. Anything else is
 * drift: a migration changed in one folder and not the other. Each entry says why.
 */
const ONLY_SQLITE = [
  // PostgreSQL drops foreign keys that could not fail (their only writers make them hold), as they
  // cost every status change and every retention delete a check per row. SQLite keeps them:
  // dropping one there means rebuilding the table.
  'foreign-key execution_events (execution_id) -> executions (id) on-delete no action',
  'foreign-key execution_log_heads (execution_id) -> executions (id) on-delete no action',
  'foreign-key execution_logs (execution_id) -> executions (id) on-delete no action',
  'foreign-key executions (retry_of) -> executions (id) on-delete no action',
  // History is append-only. SQLite: one trigger per operation, letting the pruner's deletes
  // through while retention_state.pruning is 1 (the column exists on both; PostgreSQL leaves it 0).
  'trigger audit_log_no_delete on audit_log before delete',
  'trigger audit_log_no_update on audit_log before update',
  'trigger execution_events_no_delete on execution_events before delete',
  'trigger execution_events_no_update on execution_events before update',
  // A new row's share of its agent's backlog: SQLite per row; PostgreSQL adds a statement's rows
  // per agent in its statement trigger executions_event_insert (one row updated many times in a
  // transaction costs PostgreSQL more each time).
  'trigger executions_backlog_insert on executions after insert',
];
const ONLY_POSTGRES = [
  // PostgreSQL: one statement trigger per table for UPDATE, DELETE and TRUNCATE, letting deletes
  // through in a transaction that ran SET LOCAL baton.pruning = 'on'.
  'trigger audit_log_append_only on audit_log before delete or truncate or update',
  'trigger execution_events_append_only on execution_events before delete or truncate or update',
  // SQLite has not these: there a page with no status filter seeks the status
  // indexes once per status (src/engine/list-executions.ts); PostgreSQL keeps one seek.
  'index executions_agent_recent on executions (agent, created_at desc, id desc)',
  'index executions_recent on executions (created_at desc, id desc)',
];

// Needs both stores at once, so it runs in one project only: the postgres one (the sqlite
// project has no PostgreSQL guaranteed).
describe.skipIf(STORE_KIND !== 'postgres')('the two dialects migrate to one schema', () => {
  const schema = `t_dialects_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
  const stores: StoreAdapter[] = [];

  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()));
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  });

  it('differs only where ONLY_SQLITE and ONLY_POSTGRES say', async () => {
    const sqlite = openSqlite(':memory:');
    const postgres = openPostgres({ url: PG_URL, schema, poolMax: 2 });
    stores.push(sqlite, postgres);
    await Promise.all([sqlite.migrate(), postgres.migrate()]);
    const [a, b] = await Promise.all([schemaFacts(sqlite), schemaFacts(postgres)]);

    // Two lists of one-line facts: vitest prints an unlisted difference as a +/- line.
    expect({ onlySqlite: a.filter((f) => !b.includes(f)), onlyPostgres: b.filter((f) => !a.includes(f)) }).toEqual({
      onlySqlite: [...ONLY_SQLITE].sort(),
      onlyPostgres: [...ONLY_POSTGRES].sort(),
    });
  });
});
