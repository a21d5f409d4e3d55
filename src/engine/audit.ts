import type { StoreAdapter, Tx } from '../store/adapter.ts';
import { preparedQuery } from '../store/prepared-query.ts';

export interface AuditEntry {
  at: number;
  actor: string;
  action: string;
  subject?: string | null;
  execution_id?: string | null;
  /** Ids and reason codes only: never payloads or secrets. */
  detail?: Record<string, unknown> | null;
}

/** The columns an entry fills, in auditRow's order. */
export const AUDIT_COLUMNS = ['at', 'actor', 'action', 'subject', 'execution_id', 'detail'] as const;

/** An entry as its audit_log row. */
export const auditRow = (e: AuditEntry) => ({
  at: e.at,
  actor: e.actor,
  action: e.action,
  subject: e.subject ?? null,
  execution_id: e.execution_id ?? null,
  detail: e.detail ? JSON.stringify(e.detail) : null,
});

/** appendAudit's statement, built once (preparedQuery). */
const insertAudit = preparedQuery((tx: Tx, p: ReturnType<typeof auditRow>) =>
  tx
    .insertInto('audit_log')
    .values({ at: p.at, actor: p.actor, action: p.action, subject: p.subject, execution_id: p.execution_id, detail: p.detail }),
);

/** Append to the audit log (the database refuses UPDATE and DELETE on it). */
export async function appendAudit(tx: Tx, e: AuditEntry): Promise<void> {
  await insertAudit(tx, auditRow(e));
}

/** Append several entries in few statements (the scheduler's batch path). */
export async function appendAudits(store: StoreAdapter, tx: Tx, entries: AuditEntry[]): Promise<void> {
  await store.insertMany(tx, 'audit_log', entries.map(auditRow));
}
