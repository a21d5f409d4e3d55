import { admissionHold, CLAIM_STAMP_EVERY_MS, PUSH_LAPSE_HOLD_MS } from '../../domain/admission.ts';
import { firstSpent, parseBudget } from '../../domain/budget.ts';
import { breakerAdmission } from '../../domain/breaker.ts';
import type { AlertSinkKind } from '../../domain/canary.ts';
import { BatonError, NotFound } from '../../domain/errors.ts';
import type { DeliveryMode } from '../../domain/delivery.ts';
import { newLeaseToken } from '../../domain/ids.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { AgentRow, ExecutionRow } from '../../store/schema.ts';
import { BREAKER_COLUMNS, recordBreakerChange } from '../breaker.ts';
import { readCurrentWindows } from '../budget.ts';
import { clearLapseHold } from './lapse.ts';
import { QUEUED, RUNNING, stamp } from './stamp.ts';

export interface AdmitOptions {
  now: number;
  /** Lease owner: the worker id, or the dispatching node. */
  owner: string;
  /** Most rows to admit in this call. */
  max: number;
  /** Who is claiming: pull workers take pull agents' work; Baton's dispatcher takes push agents'. */
  delivery: DeliveryMode;
  /** Where a breaker change made here (open → half-open) is alerted; default none. */
  alertSinks?: readonly AlertSinkKind[];
}

/** The agent columns admission decides from (the cap, delivery, holds, the claim stamp). */
const ADMISSION_COLUMNS = [
  'max_parallel',
  'delivery',
  'paused_at',
  'paused_by',
  'paused_reason',
  'last_claim_at',
  'lapse_hold_at',
  'lapse_hold_count',
  'budget',
] as const;
type AdmissionColumns = (typeof ADMISSION_COLUMNS)[number];

/**
 * queued → running, exactly under the agent's cap.
 *
 * The agent row is locked first (FOR NO KEY UPDATE on PostgreSQL; BEGIN IMMEDIATE on SQLite), and
 * only the *next* statement counts running rows: every admission for this agent holds the same
 * lock until it commits, and that statement's snapshot is taken after the lock was granted, so
 * the count is exact whatever the number of processes. Candidates come FIFO by
 * (priority, queued_at, id), skipping rows another transaction holds, and each update re-checks
 * `status = 'queued'` so a row cancelled or admitted meanwhile is not taken.
 *
 * Holds (a paused agent, src/domain/admission.ts) are read from that same locked row: a pause
 * commits under the same row lock, so once it has committed no admission in any process admits.
 */
export async function admit(tx: Tx, store: StoreAdapter, agentName: string, opts: AdmitOptions): Promise<ExecutionRow[]> {
  let agent: Pick<AgentRow, AdmissionColumns | (typeof BREAKER_COLUMNS)[number]> | undefined = await store
    .lockRows(tx.selectFrom('agents').select(ADMISSION_COLUMNS).select(BREAKER_COLUMNS).where('name', '=', agentName), 'admission')
    .executeTakeFirst();
  if (!agent) throw new NotFound('agent', agentName);
  if (agent.delivery !== opts.delivery) {
    throw new BatonError(
      'wrong_delivery',
      `agent '${agentName}' uses ${agent.delivery} delivery; ${opts.delivery === 'pull' ? 'Baton delivers its tasks itself' : 'workers claim its tasks'}`,
      { agent: agentName, delivery: agent.delivery },
    );
  }
  // A claimer was here (even one that takes nothing): what "no worker has claimed for N s" reads.
  // Throttled, as the row is already locked the write is cheap but a new row version each time.
  if (agent.last_claim_at === null || opts.now - Number(agent.last_claim_at) >= CLAIM_STAMP_EVERY_MS) {
    await tx.updateTable('agents').set({ last_claim_at: opts.now }).where('name', '=', agentName).execute();
  }
  // A shared-cause lapse hold ends when a worker of the agent is seen again, and a claim is that
  // sign: it ends the hold and is admitted at once (it is a live worker; making it wait gains
  // nothing). A push agent's claimer is Baton's dispatcher, so its hold ends by time instead.
  if (agent.lapse_hold_at !== null && (opts.delivery === 'pull' || opts.now - Number(agent.lapse_hold_at) >= PUSH_LAPSE_HOLD_MS)) {
    await clearLapseHold(tx, agentName, opts.now, opts.owner, opts.delivery === 'pull' ? 'claim' : 'timeout');
    agent = { ...agent, lapse_hold_at: null, lapse_hold_count: null };
  }
  // A budget is decided from its current windows' ledger rows, read here under the agent lock:
  // every admission of this agent waits for the previous one, so none admits past a spent limit
  // that another has seen (spending still grows by what the running tasks cost when they finish).
  const budget = parseBudget(agent.budget);
  const budget_spent = budget && firstSpent(budget, await readCurrentWindows(tx, agentName, budget, opts.now), opts.now);
  // The breaker (src/domain/breaker.ts) is decided on this locked row too: half-open admits one
  // probe, and the next admission, in whatever process, sees it recorded (or sees it no longer
  // running: put back in the queue or ended without a verdict, and takes another).
  const probeRunning =
    agent.breaker_state === 'half_open' &&
    agent.breaker_probe_id !== null &&
    (await tx.selectFrom('executions').select('status').where('id', '=', agent.breaker_probe_id).executeTakeFirst())?.status === 'running';
  const breaker = breakerAdmission(agent, opts.now, probeRunning);
  if (admissionHold({ ...agent, budget_spent, breaker_hold: breaker.hold }) !== null) return [];
  if (opts.max <= 0 || agent.max_parallel <= 0) return [];

  const candidates = await store
    .lockRows(
      tx
        .selectFrom('executions')
        .select(['id', 'lease_ttl_seconds', 'timeout_seconds', 'serial_key'])
        .select((eb) =>
          eb
            .selectFrom('executions as r')
            .select((e) => e.fn.countAll<number>().as('n'))
            .where('r.agent', '=', agentName)
            .where('r.status', '=', RUNNING)
            .as('running'),
        )
        .where('agent', '=', agentName)
        .where('status', '=', QUEUED)
        .where((eb) => eb.or([eb('run_after', 'is', null), eb('run_after', '<=', opts.now)]))
        // A serial key (schedule overlap policy 'queue') waits while a row with the same key runs.
        .where((eb) =>
          eb.or([
            eb('serial_key', 'is', null),
            eb.not(
              eb.exists(
                eb
                  .selectFrom('executions as k')
                  .select('k.id')
                  .whereRef('k.serial_key', '=', 'executions.serial_key')
                  .where('k.status', '=', RUNNING),
              ),
            ),
          ]),
        )
        .orderBy('priority')
        .orderBy('queued_at')
        .orderBy('id')
        .limit(Math.min(breaker.probe ? 1 : opts.max, agent.max_parallel)),
      'skip',
    )
    .execute();
  if (candidates.length === 0) return [];
  const free = agent.max_parallel - Number(candidates[0]!.running);

  const admitted: ExecutionRow[] = [];
  const serials = new Set<string>();
  for (const c of candidates.slice(0, Math.max(0, free))) {
    if (c.serial_key !== null) {
      if (serials.has(c.serial_key)) continue; // one run per serial key, also within one batch
      serials.add(c.serial_key);
    }
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
        ...stamp(opts.now, opts.owner, 'admitted'),
      }))
      .where('id', '=', c.id)
      .where('status', '=', 'queued')
      .returningAll()
      .executeTakeFirst();
    if (row) admitted.push(row);
  }
  if (breaker.probe && admitted.length > 0) {
    const probe = admitted[0]!;
    await tx.updateTable('agents').set({ breaker_state: 'half_open', breaker_probe_id: probe.id }).where('name', '=', agentName).execute();
    if (agent.breaker_state === 'open') {
      const change = {
        from: 'open',
        to: 'half_open',
        why: 'cooldown_elapsed',
        until: null,
        cooldown_ms: Number(agent.breaker_cooldown_ms),
      } as const;
      await recordBreakerChange(tx, agentName, change, opts.owner, opts.now, opts.alertSinks ?? [], probe.id);
    }
  }
  return admitted;
}
