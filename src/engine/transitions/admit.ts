import { claimStampDue, PUSH_LAPSE_HOLD_MS } from '../../domain/admission.ts';
import type { AlertSinkKind } from '../../domain/canary.ts';
import { CONTRACT_DEFAULTS } from '../../domain/defaults.ts';
import { BatonError, NotFound } from '../../domain/errors.ts';
import type { DeliveryMode } from '../../domain/delivery.ts';
import { newLeaseToken } from '../../domain/ids.ts';
import { sql } from 'kysely';
import { type StoreAdapter, type Tx } from '../../store/adapter.ts';
import { perStore, preparedQuery } from '../../store/prepared-query.ts';
import { queuedColumn } from '../backlog.ts';
import { candidatesFor, keyedCandidates } from '../candidates.ts';
import type { AgentRow, ExecutionRow } from '../../store/schema.ts';
import { BREAKER_COLUMNS, recordBreakerChange } from '../breaker.ts';
import { factsMayChange, poolBudgeted, refreshFastPathFacts } from '../fast-path-facts.ts';
import { KEY_ADMISSION_COLUMNS, KeyGate, keyRunningColumn, keyRunningOf, raiseAdmitRound } from '../flow-keys.ts';
import { requireLiveKey } from '../claim-key.ts';
import { admissionNow } from '../holds.ts';
import { endPoolWaits } from '../pool-turns.ts';
import { FLOW_COLUMNS, flowGate, type FlowReport } from '../pools.ts';
import { parsePools } from '../../domain/pools.ts';
import type { LockedAgent } from '../../store/fast-paths.ts';
import type { AdmissionCarry, AdmissionWrites } from '../admission-carry.ts';
import { clearLapseHold } from './lapse.ts';
import { QUEUED, stamp } from './stamp.ts';

export interface AdmitOptions {
  now: number;
  /** Lease owner: the worker id, or the dispatching node. */
  owner: string;
  /** Most rows to admit in this call. */
  max: number;
  /**
   * Stop admitting once the rows admitted carry this many bytes of message and payload (at least
   * one row is admitted when any can be); default CONTRACT_DEFAULTS.claimAnswerBytes.
   */
  maxBytes?: number;
  /** Who is claiming: pull workers take pull agents' work; Baton's dispatcher takes push agents'. */
  delivery: DeliveryMode;
  /** Where a breaker change made here (open → half-open) is alerted; default none. */
  alertSinks?: readonly AlertSinkKind[];
  /** Told what the flow limits said when they stopped this admission (src/engine/pools.ts). */
  onFlow?: FlowReport;
  /** The API key the claim is made with: refused (Unauthorized, nothing admitted) unless it is live (claim-key.ts). */
  keyId?: string;
  /**
   * A waiting claim's: called when the agent had no queued row at all, so no seat freeing can
   * give it work until work is queued (ClaimWaits.seatFreed wakes it only then); and where the
   * agent's queued count is read with it (SQLite), when the rows this admission took were all it
   * had queued, so a look right after it would find none (IdleAgents); PostgreSQL's claim call says
   * the same from the agent's backlog counters (baton_claim_many's 'empty').
   */
  onNothingQueued?: () => void;
  /**
   * Told, where the store has fast paths, whether the agent's row as locked here lets the store's
   * claim call decide its claims (its fact fast_claim, src/domain/fast-paths.ts).
   */
  onFastClaim?: (decides: boolean) => void;
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
  'fast_complete',
  ...KEY_ADMISSION_COLUMNS,
  ...FLOW_COLUMNS,
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
 * Take `rows` (queued → running), in admission order: each admission event counts the seats in
 * that order. Where the store has fast paths, one call (FastPaths.takeRows: one round trip while
 * the agent's and its pools' locks are held); else one update each. The rows are the
 * transaction's own (locked on PostgreSQL; SQLite's writer is alone), so each is still queued: a
 * row found otherwise fails the transaction rather than admit fewer than the limits were charged for.
 */
async function takeRows(
  tx: Tx,
  store: StoreAdapter,
  rows: readonly { id: string; lease_ttl_seconds: number; timeout_seconds: number }[],
  opts: { now: number; owner: string },
): Promise<ExecutionRow[]> {
  if (rows.length === 0) return [];
  const tokens = rows.map(() => newLeaseToken());
  const fast = store.fastPaths;
  let taken: ExecutionRow[];
  if (fast && rows.length > 1) taken = await fast.takeRows(tx, { ids: rows.map((r) => r.id), tokens, owner: opts.owner, now: opts.now });
  else {
    taken = [];
    for (const [i, c] of rows.entries()) {
      const [row] = await admitRow(tx, {
        id: c.id,
        owner: opts.owner,
        token: tokens[i]!,
        now: opts.now,
        leaseExpiresAt: opts.now + c.lease_ttl_seconds * 1000,
        deadlineAt: opts.now + c.timeout_seconds * 1000,
      });
      if (row) taken.push(row);
    }
  }
  if (taken.length !== rows.length) throw new Error(`admission took ${taken.length} of the ${rows.length} rows it held`);
  return taken;
}

/**
 * The agent row admission decides from, locked (see admit), with its fact pool_budgeted read in
 * the same statement (a pool's budget is read only where it is true).
 */
const admissionAgentFor = perStore((store) =>
  preparedQuery((db: Tx, p: { agent: string }) =>
    store.lockRows(
      db
        .selectFrom('agents')
        .select(ADMISSION_COLUMNS)
        .select(BREAKER_COLUMNS)
        .select(poolBudgeted)
        // On SQLite the running tasks per key ride along (keyRunningColumn says why only there).
        .select(store.kind === 'sqlite' ? keyRunningColumn : sql<null>`NULL`.as('key_running'))
        .select(store.kind === 'sqlite' ? queuedColumn : sql<null>`NULL`.as('queued'))
        .where('name', '=', p.agent),
      'admission',
    ),
  ),
);

/**
 * queued → running, exactly under the agent's cap.
 *
 * The agent row is locked first (FOR NO KEY UPDATE on PostgreSQL; BEGIN IMMEDIATE on SQLite) and
 * carries the seats in use (`running_count`, kept by the event trigger in the statement of every
 * change into or out of `running`, which takes the same row lock): a locked row read returns its
 * latest version, so the count is exact whatever the number of processes. Candidates come in
 * admission order (priority, fair_round, queued_at, id), skipping rows another transaction holds, and each update re-checks
 * `status = 'queued'` so a row cancelled or admitted meanwhile is not taken.
 *
 * Holds (a paused agent, src/domain/admission.ts) are read from that same locked row: a pause
 * commits under the same row lock, so once it has committed no admission in any process admits.
 */
export async function admit(
  tx: Tx,
  store: StoreAdapter,
  agentName: string,
  opts: AdmitOptions,
  /**
   * In a gathered transaction (src/engine/admissions.ts): the agent as FastPaths.lockAdmissions read it
   * (with `read` below), and what the admissions before this one changed since (AdmissionCarry).
   */
  gathered?: { locked: LockedAgent | undefined; carry: AdmissionCarry; writes?: AdmissionWrites },
): Promise<ExecutionRow[]> {
  // Where the store has fast paths, the lock, the running tasks per key, the candidates and, where
  // there are some, the pools' locks with their seats and waits (read after it) are one call. It
  // reads as many candidates as a keyed claim may (twice the rows asked: see below) before the
  // holds and seats are decided, as one statement costs less than a round trip; the rows and pools
  // locked and not used stay locked until the transaction ends.
  const read = opts.max > 0 ? { limit: 2 * opts.max, now: opts.now } : undefined;
  const locked = store.fastPaths ? (gathered?.locked ?? (await store.fastPaths.lockAgent(tx, agentName, read))) : undefined;
  const carry = gathered?.carry;
  // The writes the caller makes at the transaction's end (its rows then come from there).
  const writes = gathered?.writes;
  const row = store.fastPaths ? undefined : (await admissionAgentFor(store)(tx, { agent: agentName }))[0];
  let agent: Pick<AgentRow, AdmissionColumns | (typeof BREAKER_COLUMNS)[number]> | undefined = store.fastPaths ? locked?.row : row;
  if (!agent) throw new NotFound('agent', agentName);
  if (locked) opts.onFastClaim?.(Number(locked.row.fast_claim) === 1);
  // EXISTS comes back as 1/0 on SQLite and a boolean on PostgreSQL.
  const poolBudgetedNow = locked ? locked.poolBudgeted : Boolean(row!.pool_budgeted);
  if (agent.delivery !== opts.delivery) {
    throw new BatonError(
      'wrong_delivery',
      `agent '${agentName}' uses ${agent.delivery} delivery; ${opts.delivery === 'pull' ? 'Baton delivers its tasks itself' : 'workers claim its tasks'}`,
      { agent: agentName, delivery: agent.delivery },
    );
  }
  // A claimer was here (even one that takes nothing): what "no worker has claimed for N s" reads.
  // Throttled, as the row is already locked the write is cheap but a new row version each time.
  if (claimStampDue(agent.last_claim_at, opts.now)) {
    if (writes) writes.stamp(agentName, opts.now);
    else await tx.updateTable('agents').set({ last_claim_at: opts.now }).where('name', '=', agentName).execute();
  }
  // A shared-cause lapse hold ends when a worker of the agent is seen again, and a claim is that
  // sign: it ends the hold and is admitted at once (it is a live worker; making it wait gains
  // nothing). A push agent's claimer is Baton's dispatcher, so its hold ends by time instead.
  if (agent.lapse_hold_at !== null && (opts.delivery === 'pull' || opts.now - Number(agent.lapse_hold_at) >= PUSH_LAPSE_HOLD_MS)) {
    await clearLapseHold(tx, agentName, opts.now, opts.owner, opts.delivery === 'pull' ? 'claim' : 'timeout');
    agent = Object.assign({}, agent, { lapse_hold_at: null, lapse_hold_count: null });
  }
  // Holds are decided on this locked row. A budget from its current windows' ledger rows, read
  // under the agent lock: every admission of this agent waits for the previous one, so none
  // admits past a spent limit that another has seen (spending still grows by what the running
  // tasks cost when they finish). The breaker (src/domain/breaker.ts): half-open admits one
  // probe, and the next admission, in whatever process, sees it recorded (or sees it no longer
  // running: put back in the queue or ended without a verdict, and takes another).
  // Object.assign, not `{ ...agent, more }`: on Node 20 an object literal with anything after a
  // spread takes V8's slow path (about 1 µs a call against 0.1, create.ts queuedValues).
  const { hold, probe } = await admissionNow(tx, Object.assign({}, agent, { name: agentName, pool_budgeted: poolBudgetedNow }), opts.now);
  // Stopped before its pools: it could not use a seat of theirs, so it holds no turn in them.
  const stopped = async () => {
    const pools = parsePools(agent.pools);
    if (writes) writes.endWaits(agentName, pools);
    else await endPoolWaits(tx, agentName, pools);
    carry?.left(agentName, pools);
    return [];
  };
  if (hold !== null) return stopped();
  if (opts.max <= 0 || agent.max_parallel <= 0) return stopped();

  const free = agent.max_parallel - agent.running_count;
  if (free <= 0) return stopped();
  const want = Math.min(probe ? 1 : opts.max, free);
  // Per-key caps and throttles (src/engine/flow-keys.ts): shut keys are left out of the query, and
  // as rows of one key may fill it within the batch, it reads more than it may take.
  const keys = await KeyGate.open(tx, agentName, agent, opts.now, locked ? locked.running : keyRunningOf(row!.key_running));
  const p = { agent: agentName, now: opts.now };
  // The candidates read with the lock are the first rows of the same walk: enough unless keys are
  // shut, and where it found none, the walk without the shut keys would find none either.
  const early = locked?.candidates;
  // An agent with no queued row (its counters, read with it on SQLite) has no candidate to walk for:
  // a waiting claim's look, after each task it took, mostly finds that.
  const noneQueued = (row?.queued != null && Number(row.queued) <= 0) || locked?.queued === false;
  const candidates = noneQueued
    ? []
    : keys
      ? early && (keys.shut.length === 0 || early.length === 0)
        ? early.slice(0, want * 2)
        : await keyedCandidates(store, tx, p, want * 2, keys.shut)
      : early
        ? early.slice(0, want)
        : await candidatesFor(store)(tx, p, want);
  if (candidates.length === 0) {
    // What queued work there is waits on closed key throttles: the claim waits for the first to reopen.
    if (keys && opts.onFlow) opts.onFlow({ reopensAt: await keys.reopensAt(store, tx, opts.now) });
    // Whether it has queued rows at all: the counters when read with the agent (SQLite) or the lock
    // (fast paths), else a read.
    const counted = row?.queued != null || locked?.queued !== undefined;
    const nothing = async () => noneQueued || (!counted && (await anyQueued(tx, { agent: agentName })).length === 0);
    if (opts.onNothingQueued && (await nothing())) opts.onNothingQueued();
    return stopped();
  }
  if (opts.keyId !== undefined) await requireLiveKey(tx, opts.keyId, agentName);
  await keys?.prepare(
    tx,
    candidates.map((c) => c.flow_key),
  );
  // The agent's throttle and its pools (locked after the agent row, in name order).
  const gate = await flowGate(tx, store, Object.assign({}, agent, { name: agentName }), opts.now, candidates.length, locked?.pools, carry);
  if (gate)
    opts.onFlow?.({ pools: gate.pools, reopensAt: gate.room === 0 ? gate.reopensAt : null, turns: gate.room === 0 ? gate.turns : [] });
  const room = Math.min(want, gate ? gate.room : want);

  // The rows to take, decided before any is written: the candidates are this transaction's (locked
  // on PostgreSQL, the one writer on SQLite), so each is still queued when the update runs.
  const taking: typeof candidates = [];
  const serials = new Set<string>();
  const maxBytes = opts.maxBytes ?? CONTRACT_DEFAULTS.claimAnswerBytes;
  let bytes = 0;
  for (const c of candidates) {
    if (taking.length >= room) break;
    // A bounded answer: reading and sending the rows holds the event loop for their size.
    if (taking.length > 0 && bytes + Number(c.bytes) > maxBytes) break;
    if (keys && !keys.admits(c.flow_key, opts.now)) continue;
    if (c.serial_key !== null) {
      // One run per serial key, also within one batch and one gathered transaction.
      if (serials.has(c.serial_key) || carry?.serials.has(c.serial_key)) continue;
      serials.add(c.serial_key);
    }
    taking.push(c);
    bytes += Number(c.bytes);
    keys?.took(c.flow_key, opts.now);
  }
  // A probe's row is written at once: the breaker's write below names it.
  const later = writes && !probe ? writes : undefined;
  later?.take(
    agentName,
    taking.map((c) => c.id),
    opts.owner,
    opts.now,
  );
  const admitted = later ? [] : await takeRows(tx, store, taking, opts);
  // It took every row its agent had queued (the counters read with the agent, SQLite): a look
  // right after it would find none, as a look that found none would say.
  if (opts.onNothingQueued && row?.queued != null && admitted.length >= Number(row.queued)) opts.onNothingQueued();
  for (const k of serials) carry?.serials.add(k);
  await keys?.save(tx);
  if (later) {
    const top = Math.max(0, ...taking.map((c) => Number(c.fair_round)));
    if (top > Number(agent.admit_round)) later.round(agentName, top);
  } else await raiseAdmitRound(tx, agentName, agent.admit_round, admitted);
  await gate?.commit(taking.length);
  if (probe && admitted.length > 0) {
    const theProbe = admitted[0]!;
    const halfOpen = { breaker_state: 'half_open', breaker_probe_id: theProbe.id } as const;
    if (factsMayChange(agent, halfOpen)) await refreshFastPathFacts(tx, agentName, { pending: halfOpen });
    else await tx.updateTable('agents').set(halfOpen).where('name', '=', agentName).execute();
    if (agent.breaker_state === 'open') {
      const change = {
        from: 'open',
        to: 'half_open',
        why: 'cooldown_elapsed',
        until: null,
        cooldown_ms: Number(agent.breaker_cooldown_ms),
      } as const;
      await recordBreakerChange(tx, agentName, change, opts.owner, opts.now, opts.alertSinks ?? [], theProbe.id);
    }
  }
  return admitted;
}

/**
 * Whether a claim that took `rows` (fewer than asked) may have stopped at its byte bound rather
 * than for want of work or seats: a claim cut there carries more than the bound less one row at
 * the largest (a 256 KiB payload and a 100,000-character message), so over half the bound.
 */
export function mayBeCutShort(
  rows: readonly Pick<ExecutionRow, 'message' | 'payload'>[],
  maxBytes = CONTRACT_DEFAULTS.claimAnswerBytes,
): boolean {
  let bytes = 0;
  for (const r of rows) bytes += Buffer.byteLength(r.message) + Buffer.byteLength(r.payload);
  return bytes > maxBytes / 2;
}

/**
 * One queued row of the agent, if it has any (one seek into executions_admission). Rows the
 * candidates skip (run_after ahead, a running serial key, a shut key, locked elsewhere) count:
 * a seat freeing may be what lets them start.
 */
const anyQueued = preparedQuery((db: Tx, p: { agent: string }) =>
  db.selectFrom('executions').select('id').where('agent', '=', p.agent).where('status', '=', QUEUED).limit(1),
);
