import type { Tx } from '../store/adapter.ts';

export interface AuditEntry {
  at: number;
  actor: string;
  action: string;
  subject?: string | null;
  execution_id?: string | null;
  /** Ids and reason codes only: never payloads or secrets. */
  detail?: Record<string, unknown> | null;
}

/** Append to the audit log (the database refuses UPDATE and DELETE on it). */
export async function appendAudit(tx: Tx, e: AuditEntry): Promise<void> {
  await tx
    .insertInto('audit_log')
    .values({
      at: e.at,
      actor: e.actor,
      action: e.action,
      subject: e.subject ?? null,
      execution_id: e.execution_id ?? null,
      detail: e.detail ? JSON.stringify(e.detail) : null,
    })
    .execute();
}

/** Append several entries in one statement (the scheduler's batch path). */
export async function appendAudits(tx: Tx, entries: AuditEntry[]): Promise<void> {
  for (let i = 0; i < entries.length; i += 500) {
    await tx
      .insertInto('audit_log')
      .values(
        entries.slice(i, i + 500).map((e) => ({
          at: e.at,
          actor: e.actor,
          action: e.action,
          subject: e.subject ?? null,
          execution_id: e.execution_id ?? null,
          detail: e.detail ? JSON.stringify(e.detail) : null,
        })),
      )
      .execute();
  }
}
