import { NotFound } from '../../domain/errors.ts';
import { newLeaseToken } from '../../domain/ids.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { AgentRow, ExecutionRow } from '../../store/schema.ts';
import { appendEvents } from './event.ts';

export interface AdmitOptions {
  now: number;
  /** Lease owner: the worker id, or the dispatching node. */
  owner: string;
  /** Most rows to admit in this call. */
  max: number;
}

/**
 * queued → running, exactly under the agent's cap.
 *
 * The agent row is locked first (FOR UPDATE on PostgreSQL; BEGIN IMMEDIATE on SQLite) and only
 * then are running rows counted: every admission for this agent holds the same lock until it
 * commits, so the count is exact whatever the number of processes. Candidates are taken FIFO
 * by (priority, queued_at, id), skipping rows another transaction holds, and each update
 * re-checks `status = 'queued'` so a row cancelled or admitted meanwhile is not taken twice.
 */
export async function admit(tx: Tx, store: StoreAdapter, agentName: string, opts: AdmitOptions): Promise<ExecutionRow[]> {
  const agent: AgentRow | undefined = await store
    .lockRows(tx.selectFrom('agents').selectAll().where('name', '=', agentName), 'wait')
    .executeTakeFirst();
  if (!agent) throw new NotFound('agent', agentName);

  const { running } = await tx
    .selectFrom('executions')
    .select((eb) => eb.fn.countAll<number>().as('running'))
    .where('agent', '=', agentName)
    .where('status', '=', 'running')
    .executeTakeFirstOrThrow();
  const free = agent.max_parallel - Number(running);
  if (free <= 0 || opts.max <= 0) return [];

  const candidates = await store
    .lockRows(
      tx
        .selectFrom('executions')
        .select(['id', 'lease_ttl_seconds', 'timeout_seconds'])
        .where('agent', '=', agentName)
        .where('status', '=', 'queued')
        .where((eb) => eb.or([eb('run_after', 'is', null), eb('run_after', '<=', opts.now)]))
        .orderBy('priority')
        .orderBy('queued_at')
        .orderBy('id')
        .limit(Math.min(free, opts.max)),
      'skip',
    )
    .execute();

  const admitted: ExecutionRow[] = [];
  for (const c of candidates) {
    const row = await tx
      .updateTable('executions')
      .set((eb) => ({
        status: 'running',
        attempt: eb('attempt', '+', 1),
        lease_owner: opts.owner,
        lease_token: newLeaseToken(),
        lease_expires_at: opts.now + c.lease_ttl_seconds * 1000,
        heartbeat_at: opts.now,
        started_at: opts.now,
        deadline_at: opts.now + c.timeout_seconds * 1000,
      }))
      .where('id', '=', c.id)
      .where('status', '=', 'queued')
      .returningAll()
      .executeTakeFirst();
    if (row) admitted.push(row);
  }
  const seatsBefore = Number(running);
  await appendEvents(
    tx,
    admitted.map((row, i) => ({
      execution_id: row.id,
      agent: row.agent,
      from_status: 'queued' as const,
      to_status: 'running' as const,
      at: opts.now,
      actor: opts.owner,
      attempt: row.attempt,
      seats_in_use: seatsBefore + i + 1,
      seat_cap: agent.max_parallel,
    })),
  );
  return admitted;
}
