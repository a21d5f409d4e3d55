/**
 * How big the history is, how old its oldest row, what the retention settings are and what the
 * last prune did: for `baton doctor`, `/metrics` and the dashboard. Never a full scan: row counts
 * are the database's own estimates (PostgreSQL: pg_class.reltuples, else the statistics
 * collector's live-row count; SQLite: the rowid span, max - min + 1, exact for append-mostly
 * tables pruned from the oldest end), sizes come from the catalogue, oldest rows from indexes.
 */
import type { RetentionEnv } from '../config.ts';
import { EXECUTION_STATES } from '../domain/states.ts';
import type { EngineContext } from '../engine/context.ts';
import { statusIs } from '../engine/status-sql.ts';
import type { StoreAdapter, StoreKind } from '../store/adapter.ts';
import type { HistorySize } from '../store/history-size.ts';

export const HISTORY_TABLES = ['executions', 'execution_events', 'execution_logs', 'audit_log'] as const;
export type HistoryTable = (typeof HISTORY_TABLES)[number];

/** Rows per table (see the module comment), bytes and free bytes, as the store estimates them (store/history-size.ts). */
export interface HistoryStats extends HistorySize<HistoryTable> {
  /** Which store, for display. */
  store: StoreKind;
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
  const size = await store.historySize(HISTORY_TABLES);
  const oldestDone = await db
    .selectFrom('executions')
    .select('completed_at')
    .where('completed_at', 'is not', null)
    .orderBy('completed_at')
    .limit(1)
    .executeTakeFirst();
  // With an index of every execution in created_at order, its end (executions_recent). Without
  // one, the oldest of each status's oldest, one seek per status into executions_status_recent.
  let oldestCreated: number | null = null;
  if (store.createdOrderIndexes) {
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
    store: store.describe().kind,
    ...size,
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
