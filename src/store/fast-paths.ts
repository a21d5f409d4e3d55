import type { Kysely } from 'kysely';
import type { DeliveryMode } from '../domain/delivery.ts';
import type { AgentRow, DB, ExecutionRow, NewExecution } from './schema.ts';

/** A plain submit's own fields: the new row without what its agent gives (the contract defaults). */
export type SubmitFields = Omit<
  NewExecution,
  | 'status'
  | 'attempt'
  | 'queued_at'
  | 'created_at'
  | 'changed_at'
  | 'changed_by'
  | 'change_reason'
  | 'max_redeliveries'
  | 'timeout_seconds'
  | 'lease_ttl_seconds'
  | 'retry_policy'
> & {
  /** The submit's own retry policy (JSON), or null for the agent's. */
  retry_policy: string | null;
};

/**
 * One plain submit: the row's fields (a key, but no debounce or singleton: those are decided in
 * the engine's transaction), when and by whom, and its creation audit's detail (JSON).
 */
export interface SubmitRequest {
  id: string;
  f: SubmitFields;
  now: number;
  actor: string;
  auditDetail: string | null;
}

/** A submit made: its row, and whether its agent was paused as the submit found it. */
export interface Submitted {
  row: ExecutionRow;
  agentPaused: boolean;
}

/** One claim: the agent (as `id`: one claim per agent per call), and how it admits (transitions/admit.ts AdmitOptions). */
export interface ClaimRequest {
  id: string;
  delivery: DeliveryMode;
  owner: string;
  max: number;
  now: number;
  /** Stop once the rows taken carry this many bytes (at least one row is taken when any can be). */
  maxBytes?: number;
  /** The API key the claim is made with: a claim whose key is not live is left undecided (engine/claim-key.ts). */
  keyId?: string;
  /**
   * Called when the claim had a free seat and its agent no queued row at all, or when it took the
   * last row its agent had queued (as admit.ts's onNothingQueued): a freed seat can give a waiting
   * claim nothing then (Waiters.wakeForSeat), and a look right after need not cover the agent.
   */
  onNothingQueued?: () => void;
}

/** One completion: the execution, its lease token, and the values it writes (transitions/complete.ts). */
export interface CompletionRequest {
  id: string;
  token: string;
  status: string;
  now: number;
  actor: string;
  result: string | null;
  error_code: string | null;
  error_message: string | null;
  usage: string | null;
  reason: string;
}

/**
 * The hot transitions as single store operations, each one round trip and one commit outside a
 * transaction, for the common case only: a claim with no hold, a completion with no side effect,
 * a plain submit. Whether the common case applies is read from the facts the engine keeps on the
 * rows (agents.fast_claim, fast_complete; executions.fast_complete: src/domain/fast-paths.ts);
 * the rules themselves are the engine's. Each operation leaves out, and writes nothing for, what
 * it does not decide: the engine then runs its transaction, which knows every rule.
 * PostgreSQL implements them (postgres-fast-paths.ts), where a transaction costs BEGIN and COMMIT
 * round trips. SQLite has none: its write transactions are group-committed
 * (sqlite-group-commit.ts), so the engine's transaction is already its cheapest path.
 * Each operation is run again when the database ended it on a conflict (a deadlock, a
 * serialization failure: its writes were all undone), as a transaction is.
 */
export interface FastPaths {
  /**
   * Run one guarded statement of the engine's alone, outside a transaction (a heartbeat's lease
   * renewal, a release's common case). Use for a transition that is one statement either way.
   */
  alone<T>(statement: (db: Kysely<DB>) => Promise<T>): Promise<T>;
  /** One plain submit. Throws NotFound or BacklogFull having written nothing. */
  submitOne(s: SubmitRequest): Promise<Submitted>;
  /**
   * Plain submits gathered from one turn (engine/gather.ts), in one call: the new-work turn of
   * each agent in name order, then each submit in the order given. A submit missing from the map
   * was refused and wrote nothing (submitOne says why). Ids distinct.
   */
  submitGathered(s: readonly SubmitRequest[]): Promise<Map<string, Submitted>>;
  /**
   * submitGathered and then claimMany in one call and one commit: the submits as submitGathered
   * makes them, then the claims (of claimers parked on those agents) as claimMany admits them,
   * seeing the rows just submitted. Answers each as those two would; if the call fails neither
   * part was written. Ids distinct, claim agents distinct.
   */
  submitClaim(
    s: readonly SubmitRequest[],
    c: readonly ClaimRequest[],
  ): Promise<{ submitted: Map<string, Submitted>; claimed: Map<string, ExecutionRow[]> }>;
  /**
   * Claims of several agents in one call: each agent whose delivery matches and whose fact allows
   * admits FIFO up to its free seats and its answer's bytes, as transitions/admit.ts would. Returns
   * the rows each agent admitted (perhaps none), by agent; an agent missing from the map was not
   * decided (unknown, other delivery, a hold may apply, a serial key among its candidates) and
   * nothing was written for it. Agents distinct.
   */
  claimMany(c: readonly ClaimRequest[]): Promise<Map<string, ExecutionRow[]>>;
  /**
   * Completions in one call: each execution whose own fact and whose agent's allow is completed by
   * its lease token (as transitions/complete.ts completeWithLease). Returns the rows completed, by
   * id; one missing was not completed and nothing was written for it. Ids distinct.
   */
  completeMany(c: readonly CompletionRequest[]): Promise<Map<string, ExecutionRow>>;
  /**
   * Within the admission transaction `tx`: the rows it decided to admit (ids, in admission order,
   * each with its new lease token), queued → running as transitions/admit.ts writes them one by
   * one, in one call. Returns the rows updated, in the order given (one not queued is left out).
   */
  takeRows(tx: Kysely<DB>, t: { ids: string[]; tokens: string[]; owner: string; now: number }): Promise<ExecutionRow[]>;
  /**
   * Within the admission transaction `tx`, holding the agent's lock: the pools `names` locked in
   * name order (as src/engine/pools.ts lockPools), each with a seat limit read after the locks for
   * its seats in use and its waits for a turn (as seatsAndWaits), in one call. Reads only.
   */
  lockPools(tx: Kysely<DB>, names: readonly string[]): Promise<LockedPools>;
  /**
   * Within the admission transaction `tx`: the agent's row locked as admission locks it, with its
   * running tasks per concurrency key read after the lock (as src/engine/flow-keys.ts
   * runningPerKey) and whether a pool it draws from has a budget (src/engine/fast-path-facts.ts
   * poolBudgeted), in one call; with `read`, also its first `read.limit` candidates at `read.now`,
   * taken (as src/engine/candidates.ts candidatesFor), after the lock, and where it found some
   * and the agent draws from pools, its pools locked after it (as lockPools). Reads only;
   * undefined: no such agent.
   */
  lockAgent(tx: Kysely<DB>, agent: string, read?: { limit: number; now: number }): Promise<LockedAgent | undefined>;
  /**
   * Within the admission transaction `tx`: lockAgent with `read` for each agent of `items`, in one
   * round trip, each agent locked and read in name order (the order every admission locks agent
   * rows in), its pools not locked; then, after every agent's lock, the pools of the agents that
   * found candidates, each once, locked in name order with their seats and waits (as lockPools).
   * Each agent's `queued` says, where it found no candidate, whether it has any queued row at all.
   * Reads only; an agent missing from the map was not found.
   */
  lockAdmissions(
    tx: Kysely<DB>,
    items: ReadonlyArray<{ agent: string; limit: number; now: number }>,
  ): Promise<{ agents: Map<string, LockedAgent>; pools: LockedPools | undefined }>;
  /**
   * Within the admission transaction `tx`, holding the agents' locks: what the admissions of
   * several agents decided to write to their agent rows and their rows to take, in one call
   * whatever the number of agents. First each agent's claim stamp (`stamp`: its last_claim_at)
   * and admit_round raised to `round` (kept where higher) and the waits ended, then each take as takeRows makes it,
   * agent after agent in the order given. Returns every row taken, in that order.
   */
  admitWrites(tx: Kysely<DB>, w: AdmitWrites): Promise<ExecutionRow[]>;
}

/** FastPaths.admitWrites' writes. */
export interface AdmitWrites {
  agents: Array<{ agent: string; stamp: number | null; round: number | null }>;
  takes: Array<{ ids: string[]; tokens: string[]; owner: string; now: number }>;
  /** Agents whose waits in these pools end (as src/engine/pool-turns.ts endPoolWaits), before the takes. */
  ends?: Array<{ agent: string; pools: string[] }>;
}

/** What FastPaths.lockAgent read of one agent. */
export interface LockedAgent {
  row: AgentRow;
  running: Map<string, number>;
  poolBudgeted: boolean;
  candidates?: LockedCandidate[];
  pools?: LockedPools;
  /** With candidates read and none found: whether the agent has a queued row at all (FastPaths.lockAdmissions). */
  queued?: boolean;
}

/** What admission reads of a candidate row (src/engine/candidates.ts), here or in FastPaths.lockAgent. */
export interface LockedCandidate {
  id: string;
  lease_ttl_seconds: number;
  timeout_seconds: number;
  serial_key: string | null;
  flow_key: string | null;
  fair_round: number;
  /** Its message and payload, in bytes (octet_length reads the stored length, not the text). */
  bytes: number;
}

/** FastPaths.lockPools' answer: the pools locked, in name order, and each seated pool's seats in use and waits. */
export interface LockedPools {
  pools: Array<{ name: string; max_parallel: number | null; throttle: string | null; throttle_tat: number | null }>;
  seats: Map<string, { inUse: number; waits: Array<{ agent: string; since: number; seen_at: number }> }>;
}

/** A row of baton_lock_pools (PostgreSQL) or of the pools' one read on SQLite (src/engine/pools.ts). */
export interface LockedPoolRow {
  pool: string;
  max_parallel: number | null;
  throttle: string | null;
  throttle_tat: string | number | null;
  agent: string | null;
  since: string | number | null;
  seen_at: string | number | null;
}

/** `read` with only the pools named `names` (those found: a pool not locked is left out). */
export function somePools(read: LockedPools, names: readonly string[]): LockedPools {
  const out: LockedPools = { pools: read.pools.filter((p) => names.includes(p.name)), seats: new Map() };
  for (const p of out.pools) {
    const s = read.seats.get(p.name);
    if (s) out.seats.set(p.name, s);
  }
  return out;
}

/** Those rows (a pool, then the waits of the seated pools) as LockedPools. */
export function lockedPools(rows: readonly LockedPoolRow[]): LockedPools {
  const out: LockedPools = { pools: [], seats: new Map() };
  for (const r of rows) {
    if (r.agent !== null) {
      out.seats.get(r.pool)?.waits.push({ agent: r.agent, since: Number(r.since), seen_at: Number(r.seen_at) });
      continue;
    }
    out.pools.push({
      name: r.pool,
      max_parallel: r.max_parallel,
      throttle: r.throttle,
      throttle_tat: r.throttle_tat === null ? null : Number(r.throttle_tat),
    });
    if (r.max_parallel !== null) out.seats.set(r.pool, { inUse: Number(r.since), waits: [] });
  }
  return out;
}
