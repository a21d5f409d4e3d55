import { sql, type Kysely } from 'kysely';
import { admissionHold, CLAIM_STAMP_EVERY_MS, PUSH_LAPSE_HOLD_MS } from '../../domain/admission.ts';
import { firstSpent, parseBudget } from '../../domain/budget.ts';
import { breakerAdmission } from '../../domain/breaker.ts';
import type { AlertSinkKind } from '../../domain/canary.ts';
import { BatonError, NotFound } from '../../domain/errors.ts';
import type { DeliveryMode } from '../../domain/delivery.ts';
import { newLeaseToken } from '../../domain/ids.ts';
import { type StoreAdapter, type Tx } from '../../store/adapter.ts';
import { perStore, preparedQuery } from '../../store/prepared-query.ts';
import type { AgentRow, DB, ExecutionRow } from '../../store/schema.ts';
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
  'running_count',
] as const;
type AdmissionColumns = (typeof ADMISSION_COLUMNS)[number];

/** One candidate queued → running, re-checking `queued` (built once: preparedQuery). */
const admitRow = preparedQuery(
  (db: Tx, p: { id: string; owner: string; token: string; now: number; leaseExpiresAt: number; deadlineAt: number }) =>
    db
      .updateTable('executions')
      .set((eb) => ({
        status: 'running',
        attempt: eb('attempt', '+', 1),
        lease_owner: p.owner,
        lease_token: p.token,
        lease_expires_at: p.leaseExpiresAt,
        heartbeat_at: p.now,
        started_at: p.now,
        deadline_at: p.deadlineAt,
        ...stamp(p.now, p.owner, 'admitted'),
      }))
      .where('id', '=', p.id)
      .where('status', '=', 'queued')
      .returningAll(),
);

/**
 * The next queued rows an agent may admit, FIFO, at most `limit` (the shape: SQLite writes it in
 * the text), skipping rows another transaction holds (PostgreSQL) and rows whose serial key runs.
 * One per store, as its row locks differ; built once per limit (preparedQuery).
 */
const candidatesFor = perStore((store) =>
  preparedQuery((db: Tx, p: { agent: string; now: number }, limit: number) =>
    store.lockRows(
      db
        .selectFrom('executions')
        .select(['id', 'lease_ttl_seconds', 'timeout_seconds', 'serial_key'])
        .where('agent', '=', p.agent)
        .where('status', '=', QUEUED)
        .where((eb) => eb.or([eb('run_after', 'is', null), eb('run_after', '<=', p.now)]))
        // A serial key (schedule overlap policy 'queue') waits while a row with the same key runs.
        // `SELECT 1`: the partial index executions_serial_running then covers the check, and
        // SQLite picks it even on a store never analysed (with `k.id` it walked every running
        // row through executions_status_recent instead).
        .where((eb) =>
          eb.or([
            eb('serial_key', 'is', null),
            eb.not(
              eb.exists(
                eb
                  .selectFrom('executions as k')
                  .select(sql.lit(1).as('one'))
                  .whereRef('k.serial_key', '=', 'executions.serial_key')
                  .where('k.status', '=', RUNNING),
              ),
            ),
          ]),
        )
        .orderBy('priority')
        .orderBy('queued_at')
        .orderBy('id')
        .limit(limit),
      'skip',
    ),
  ),
);

/** The agent row admission decides from, locked (see admit). */
const admissionAgentFor = perStore((store) =>
  preparedQuery((db: Tx, p: { agent: string }) =>
    store.lockRows(db.selectFrom('agents').select(ADMISSION_COLUMNS).select(BREAKER_COLUMNS).where('name', '=', p.agent), 'admission'),
  ),
);

/**
 * queued → running, exactly under the agent's cap.
 *
 * The agent row is locked first (FOR NO KEY UPDATE on PostgreSQL; BEGIN IMMEDIATE on SQLite) and
 * carries the seats in use (`running_count`, kept by the event trigger in the statement of every
 * change into or out of `running`, which takes the same row lock): a locked row read returns its
 * latest version, so the count is exact whatever the number of processes. Candidates come FIFO by
 * (priority, queued_at, id), skipping rows another transaction holds, and each update re-checks
 * `status = 'queued'` so a row cancelled or admitted meanwhile is not taken.
 *
 * Holds (a paused agent, src/domain/admission.ts) are read from that same locked row: a pause
 * commits under the same row lock, so once it has committed no admission in any process admits.
 */
export async function admit(tx: Tx, store: StoreAdapter, agentName: string, opts: AdmitOptions): Promise<ExecutionRow[]> {
  let agent: Pick<AgentRow, AdmissionColumns | (typeof BREAKER_COLUMNS)[number]> | undefined = (
    await admissionAgentFor(store)(tx, { agent: agentName })
  )[0];
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

  const free = agent.max_parallel - agent.running_count;
  if (free <= 0) return [];
  const candidates = await candidatesFor(store)(tx, { agent: agentName, now: opts.now }, Math.min(breaker.probe ? 1 : opts.max, free));
  if (candidates.length === 0) return [];

  const admitted: ExecutionRow[] = [];
  const serials = new Set<string>();
  for (const c of candidates) {
    if (c.serial_key !== null) {
      if (serials.has(c.serial_key)) continue; // one run per serial key, also within one batch
      serials.add(c.serial_key);
    }
    const [row] = await admitRow(tx, {
      id: c.id,
      owner: opts.owner,
      token: newLeaseToken(),
      now: opts.now,
      leaseExpiresAt: opts.now + c.lease_ttl_seconds * 1000,
      deadlineAt: opts.now + c.timeout_seconds * 1000,
    });
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

/** admitInOneStatement's statement, built once (preparedQuery); `max` tokens, one per row it may take. */
const claimInOneStatement = preparedQuery(
  (db: Kysely<DB>, v: { agent: string; delivery: DeliveryMode; owner: string; tokens: string[]; max: number; now: number }) => {
    const cast = (v: number) => sql<number>`cast(${v} as bigint)`;
    return db
      .with('a', (db) =>
        db
          .selectFrom('agents')
          .select(['max_parallel', 'running_count', 'last_claim_at'])
          .where('name', '=', v.agent)
          .where('delivery', '=', v.delivery)
          .where('paused_at', 'is', null)
          .where('lapse_hold_at', 'is', null)
          .where('budget', 'is', null)
          .where((eb) => eb.or([eb('breaker_config', 'is', null), eb('breaker_state', '=', 'closed')]))
          .forNoKeyUpdate(),
      )
      .with('c', (db) =>
        db
          .selectFrom('executions')
          .select(['id', 'serial_key', 'priority', 'queued_at', sql<string>`ctid`.as('row_ctid')])
          .where('agent', '=', v.agent)
          .where('status', '=', QUEUED)
          .where((eb) => eb.or([eb('run_after', 'is', null), eb('run_after', '<=', v.now)]))
          .orderBy('priority')
          .orderBy('queued_at')
          .orderBy('id')
          // No agent row (a hold, or none): no candidates. Never more than the free seats.
          .limit(sql<number>`coalesce((SELECT greatest(0, least(${v.max}::int, max_parallel - running_count)) FROM a), 0)`)
          .forNoKeyUpdate()
          .skipLocked(),
      )
      .with('picked', (db) =>
        db
          .selectFrom('c')
          .select(['id', 'serial_key', 'row_ctid', sql<number>`row_number() OVER (ORDER BY priority, queued_at, id)::int`.as('rn')])
          // Updated in this order, so the trigger numbers the seats first come, first seated.
          .orderBy('rn'),
      )
      .with('upd', (db) =>
        db
          .updateTable('executions as x')
          .from('picked as p')
          .set((eb) => ({
            status: 'running',
            attempt: eb('x.attempt', '+', 1),
            lease_owner: v.owner,
            lease_token: sql<string>`(${v.tokens}::text[])[p.rn]`,
            lease_expires_at: sql<number>`${cast(v.now)} + x.lease_ttl_seconds * 1000`,
            heartbeat_at: cast(v.now),
            started_at: cast(v.now),
            deadline_at: sql<number>`${cast(v.now)} + x.timeout_seconds * 1000`,
            ...stamp(v.now, v.owner, 'admitted'),
          }))
          // Found again by position, a Tid Scan whatever the statistics say (the rows are locked,
          // so it cannot move). By id, a generic plan made while few rows were queued walked the
          // whole live index instead of the primary key (test/plans.test.ts).
          .where(sql<boolean>`x.ctid = p.row_ctid`)
          .where('x.status', '=', QUEUED)
          .where((eb) => eb.not(eb.exists(eb.selectFrom('picked as s').select('s.id').where('s.serial_key', 'is not', null))))
          .returningAll('x'),
      )
      .selectFrom(sql<{ one: number }>`(SELECT 1)`.as('one'))
      .leftJoin('upd', (join) => join.onTrue())
      .selectAll('upd')
      .select((eb) => [
        eb.exists(eb.selectFrom('a').select('a.max_parallel')).as('_decided'),
        eb.exists(eb.selectFrom('picked').select('picked.id').where('picked.serial_key', 'is not', null)).as('_serial'),
        eb.selectFrom('a').select('a.last_claim_at').as('_last_claim_at'),
      ])
      .orderBy('upd.priority')
      .orderBy('upd.queued_at')
      .orderBy('upd.id');
  },
);

/**
 * The common claim as one statement (PostgreSQL): an agent with no hold (not paused, no lapse hold,
 * no budget, breaker off or closed) admits FIFO up to its free seats in a single round trip.
 * `undefined` when this path does not decide — unknown agent, other delivery, a hold, or a queued
 * row with a serial key among the next candidates — and nothing was written: run `admit` in a
 * transaction instead, which knows every rule and every refusal.
 *
 * Exactness is the transaction path's, in one statement: the agent row is locked first
 * (FOR NO KEY UPDATE; a lock returns the row's latest version, so `running_count` is exact), the
 * candidate count is limited by it, candidates are locked SKIP LOCKED (a row another admission
 * took meanwhile fails its re-checked `status = 'queued'`), and the event trigger adds each seat
 * in this statement, under the same lock. A serial key's "none of mine running" check would read
 * the statement's snapshot, older than the lock, so those rows take the transaction path.
 * The claim stamp (`last_claim_at`) follows in a statement of its own when due (every
 * CLAIM_STAMP_EVERY_MS per agent). Prepared once per connection like every named statement, so
 * PostgreSQL may keep one generic plan for it: test/plans.test.ts checks that plan seeks
 * executions_admission over a long history (planned at each call until 2026-12-01, which cost
 * about 0.7 ms of database CPU per claim; docs/benchmarks.md).
 */
export async function admitInOneStatement(store: StoreAdapter, agentName: string, opts: AdmitOptions): Promise<ExecutionRow[] | undefined> {
  if (!store.loneStatements) return undefined;
  const tokens = Array.from({ length: Math.max(0, opts.max) }, newLeaseToken);
  const rows = await claimInOneStatement(store.db, {
    agent: agentName,
    delivery: opts.delivery,
    owner: opts.owner,
    tokens,
    max: tokens.length,
    now: opts.now,
  });
  const head = rows[0];
  if (!head || !head._decided || head._serial) return undefined;
  if (head._last_claim_at === null || opts.now - Number(head._last_claim_at) >= CLAIM_STAMP_EVERY_MS) {
    await store.db
      .updateTable('agents')
      .set({ last_claim_at: opts.now })
      .where('name', '=', agentName)
      .where((eb) => eb.or([eb('last_claim_at', 'is', null), eb('last_claim_at', '<', opts.now)]))
      .execute();
  }
  return rows.filter((r) => r.id !== null).map(({ _decided, _serial, _last_claim_at, ...row }) => row as ExecutionRow);
}
