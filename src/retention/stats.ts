/**
 * How big the history is, how old its oldest row, what the retention settings are and what the
 * last prune did: for `baton doctor`, `/metrics` and the dashboard. Never a full scan: row counts
 * are the database's own estimates (PostgreSQL: pg_class.reltuples, else the statistics
 * collector's live-row count; SQLite: the rowid span, max - min + 1, exact for append-mostly
 * tables pruned from the oldest end), sizes come from the catalogue, oldest rows from indexes.
 */
import { sql } from 'kysely';
import type { RetentionEnv } from '../config.ts';
import { EXECUTION_STATES } from '../domain/states.ts';
import type { EngineContext } from '../engine/context.ts';
import { statusIs } from '../engine/status-sql.ts';
import type { StoreAdapter } from '../store/adapter.ts';

export const HISTORY_TABLES = ['executions', 'execution_events', 'execution_logs', 'audit_log'] as const;
export type HistoryTable = (typeof HISTORY_TABLES)[number];

export interface HistoryStats {
  store: StoreAdapter['kind'];
  /** Estimated rows per table (see the module comment); null when the database has no estimate yet. */
  rows: Record<HistoryTable, number | null>;
  /** How the row counts were estimated. */
  rows_estimate: 'reltuples' | 'rowid_span';
  /** Bytes the database takes: SQLite file pages (incl. free ones); PostgreSQL, the schema's tables with indexes and TOAST. */
  bytes: number;
  /** SQLite: bytes in free pages, reusable and returned by incremental vacuum; PostgreSQL: null. */
  free_bytes: number | null;
  /** completed_at of the oldest finished execution, and created_at of the oldest execution (epoch ms). */
  oldest_completed_at: number | null;
  oldest_created_at: number | null;
  oldest_audit_at: number | null;
  retention: { days: number; audit_days: number; archive_dir: string | null };
  last_prune: {
    started_at: number | null;
    completed_at: number | null;
    duration_ms: number | null;
    executions: number | null;
    audit: number | null;
    error: string | null;
    total_executions: number;
    total_audit: number;
  };
}

const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

export type HistorySettings = Pick<RetentionEnv, 'retentionDays' | 'auditRetentionDays'> & { archiveDir?: string };

/** The same, for a caller that holds the engine rather than a store (GET /v1/history): routes never touch the store. */
export function readEngineHistoryStats(engine: EngineContext, settings: HistorySettings): Promise<HistoryStats> {
  return readHistoryStats(engine.store, settings);
}

/** Read the history's size and age through `store.reader` (a handful of index and catalogue reads). */
export async function readHistoryStats(store: StoreAdapter, settings: HistorySettings): Promise<HistoryStats> {
  const db = store.reader;
  const rows = {} as Record<HistoryTable, number | null>;
  let bytes = 0;
  let free: number | null = null;
  if (store.kind === 'postgres') {
    const r = await sql<{ relname: string; est: number | null; bytes: number }>`
      SELECT c.relname, coalesce(nullif(c.reltuples, -1)::bigint, s.n_live_tup) AS est, pg_total_relation_size(c.oid) AS bytes
      FROM pg_class c
      LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
      WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'`.execute(db);
    for (const t of r.rows) {
      bytes += Number(t.bytes);
      if ((HISTORY_TABLES as readonly string[]).includes(t.relname)) rows[t.relname as HistoryTable] = num(t.est);
    }
  } else {
    const pragma = async (name: string) => Number(Object.values((await sql.raw(`PRAGMA ${name}`).execute(db)).rows[0] as object)[0]);
    const pageSize = await pragma('page_size');
    bytes = (await pragma('page_count')) * pageSize;
    free = (await pragma('freelist_count')) * pageSize;
    for (const t of HISTORY_TABLES) {
      // min() and max() of the rowid are one B-tree seek each, but only as separate statements:
      // SQLite's min/max optimisation skips a query with both (it scanned the table: 163 ms at 1M rows).
      const r = await sql<{
        lo: number | null;
        hi: number | null;
      }>`SELECT (SELECT min(rowid) FROM ${sql.table(t)}) AS lo, (SELECT max(rowid) FROM ${sql.table(t)}) AS hi`.execute(db);
      const { lo, hi } = r.rows[0] ?? { lo: null, hi: null };
      rows[t] = lo === null || hi === null ? 0 : Number(hi) - Number(lo) + 1;
    }
  }
  for (const t of HISTORY_TABLES) rows[t] ??= null;
  const oldestDone = await db
    .selectFrom('executions')
    .select('completed_at')
    .where('completed_at', 'is not', null)
    .orderBy('completed_at')
    .limit(1)
    .executeTakeFirst();
  // PostgreSQL: the end of executions_recent. SQLite: the oldest of each status's oldest, one seek
  // per status into executions_status_recent (its migration 0024 dropped executions_recent).
  let oldestCreated: number | null = null;
  if (store.kind === 'postgres') {
    const r = await db.selectFrom('executions').select('created_at').orderBy('created_at').orderBy('id').limit(1).executeTakeFirst();
    oldestCreated = num(r?.created_at);
  } else {
    for (const status of EXECUTION_STATES) {
      const r = await db
        .selectFrom('executions')
        .select('created_at')
        .where('status', '=', statusIs(status))
        .orderBy('created_at')
        .limit(1)
        .executeTakeFirst();
      const at = num(r?.created_at);
      if (at !== null && (oldestCreated === null || at < oldestCreated)) oldestCreated = at;
    }
  }
  const oldestAudit = await db.selectFrom('audit_log').select('at').orderBy('id').limit(1).executeTakeFirst();
  const state = await db.selectFrom('retention_state').selectAll().where('id', '=', 'retention').executeTakeFirst();
  return {
    store: store.kind,
    rows,
    rows_estimate: store.kind === 'postgres' ? 'reltuples' : 'rowid_span',
    bytes,
    free_bytes: free,
    oldest_completed_at: num(oldestDone?.completed_at),
    oldest_created_at: oldestCreated,
    oldest_audit_at: num(oldestAudit?.at),
    retention: { days: settings.retentionDays, audit_days: settings.auditRetentionDays, archive_dir: settings.archiveDir ?? null },
    last_prune: {
      started_at: num(state?.last_started_at),
      completed_at: num(state?.last_completed_at),
      duration_ms: num(state?.last_duration_ms),
      executions: num(state?.last_executions),
      audit: num(state?.last_audit),
      error: state?.last_error ?? null,
      total_executions: Number(state?.total_executions ?? 0),
      total_audit: Number(state?.total_audit ?? 0),
    },
  };
}
