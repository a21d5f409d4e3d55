/** The history's size, age, retention settings and last prune (GET /v1/history). */
import { z } from 'zod';

const Timestamp = z.string().describe('ISO-8601 UTC timestamp');
const Estimate = z.number().int().nullable().describe('estimated rows (null: the database has no estimate yet)');

export const HistoryStats = z.object({
  store: z.enum(['sqlite', 'postgres']),
  rows: z.object({ executions: Estimate, execution_events: Estimate, execution_logs: Estimate, audit_log: Estimate }),
  rows_estimate: z
    .enum(['reltuples', 'rowid_span'])
    .describe('reltuples: PostgreSQL planner statistics; rowid_span: SQLite max(rowid) - min(rowid) + 1'),
  bytes: z.number().int().describe('database size: SQLite file pages; PostgreSQL tables with indexes and TOAST'),
  free_bytes: z.number().int().nullable().describe('SQLite: free pages awaiting incremental vacuum; PostgreSQL: null'),
  oldest_completed_at: Timestamp.nullable().describe('the oldest finished execution'),
  oldest_created_at: Timestamp.nullable().describe('the oldest execution of any status'),
  oldest_audit_at: Timestamp.nullable(),
  retention: z.object({
    days: z.number().describe('BATON_RETENTION_DAYS (0: keep everything)'),
    audit_days: z.number().describe('BATON_AUDIT_RETENTION_DAYS (0: keep everything)'),
    archive_dir: z.string().nullable().describe('BATON_ARCHIVE_DIR, where pruned executions are archived first'),
  }),
  last_prune: z.object({
    started_at: Timestamp.nullable(),
    completed_at: Timestamp.nullable(),
    duration_ms: z.number().int().nullable(),
    executions: z.number().int().nullable().describe('executions the last sweep removed (with their events, logs and keys)'),
    audit: z.number().int().nullable().describe('audit rows the last sweep removed'),
    error: z.string().nullable().describe('why the last sweep stopped, if it failed'),
    total_executions: z.number().int(),
    total_audit: z.number().int(),
  }),
});
export type HistoryStats = z.infer<typeof HistoryStats>;
