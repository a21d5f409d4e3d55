import { sql } from 'kysely';
import { newExecutionId } from '../../src/domain/ids.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import type { ExecutionRow, NewExecution } from '../../src/store/schema.ts';

/**
 * Write an execution row exactly as given, bypassing the engine: this is how canary tests put a
 * violating state into the database (the event trigger still records its creation).
 */
export async function writeRow(store: StoreAdapter, now: number, row: Partial<NewExecution> & { agent: string }): Promise<ExecutionRow> {
  const values: NewExecution = {
    id: newExecutionId(),
    trigger_kind: 'api',
    origin: '{}',
    message: 'canary test',
    payload: 'null',
    priority: 0,
    status: 'queued',
    attempt: 0,
    max_redeliveries: 3,
    timeout_seconds: 900,
    lease_ttl_seconds: 30,
    created_at: now,
    queued_at: now,
    changed_at: now,
    changed_by: 'test',
    ...row,
  };
  return store.db.insertInto('executions').values(values).returningAll().executeTakeFirstOrThrow();
}

/** A running row with a live lease, as admission would leave it. */
export function runningRow(now: number, agent: string, extra: Partial<NewExecution> = {}): Partial<NewExecution> & { agent: string } {
  return {
    agent,
    status: 'running',
    attempt: 1,
    lease_owner: 'worker:test',
    lease_token: 'ls_test_' + Math.random().toString(36).slice(2),
    lease_expires_at: now + 30_000,
    heartbeat_at: now,
    started_at: now,
    deadline_at: now + 900_000,
    ...extra,
  };
}

/**
 * Run `fn` with the running_has_lease CHECK out of the way, to write a state the database
 * normally refuses (PostgreSQL: drop and re-add the constraint; SQLite: ignore_check_constraints).
 * `fn` must leave no violating row behind when it returns, or re-adding the constraint fails.
 */
export async function withoutLeaseCheck(store: StoreAdapter, fn: () => Promise<void>): Promise<void> {
  if (store.kind === 'postgres') {
    await sql`ALTER TABLE executions DROP CONSTRAINT running_has_lease`.execute(store.db);
    try {
      await fn();
    } finally {
      await sql`ALTER TABLE executions ADD CONSTRAINT running_has_lease CHECK (status <> 'running' OR (lease_token IS NOT NULL AND lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))`.execute(store.db);
    }
  } else {
    await sql`PRAGMA ignore_check_constraints = ON`.execute(store.db);
    try {
      await fn();
    } finally {
      await sql`PRAGMA ignore_check_constraints = OFF`.execute(store.db);
    }
  }
}

/** Hide a table for a moment (a real failing read for H-01, a missing table for E-06). */
export async function withTableRenamed(store: StoreAdapter, table: string, fn: () => Promise<void>): Promise<void> {
  await sql`ALTER TABLE ${sql.table(table)} RENAME TO ${sql.table(table + '_hidden')}`.execute(store.db);
  try {
    await fn();
  } finally {
    await sql`ALTER TABLE ${sql.table(table + '_hidden')} RENAME TO ${sql.table(table)}`.execute(store.db);
  }
}
