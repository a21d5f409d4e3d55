import { sql, type Kysely } from 'kysely';
import { CLAIM_STAMP_EVERY_MS } from '../domain/admission.ts';
import { CONTRACT_DEFAULTS } from '../domain/defaults.ts';
import { BacklogFull, NotFound } from '../domain/errors.ts';
import { newLeaseToken } from '../domain/ids.ts';
import {
  lockedPools,
  type AdmitWrites,
  type ClaimRequest,
  type CompletionRequest,
  type FastPaths,
  type LockedAgent,
  type LockedCandidate,
  type LockedPoolRow,
  type LockedPools,
  type SubmitRequest,
  type Submitted,
} from './fast-paths.ts';
import type { AgentRow, DB, ExecutionRow } from './schema.ts';

const made = new WeakMap<Kysely<DB>, FastPaths>();

/**
 * PostgreSQL's fast paths on `db`: each hot transition one call of its SQL function (migrations;
 * the newest definition of each is the live one), run alone and run again on a conflict (`lone`).
 * One object per handle.
 */
export function postgresFastPaths(db: Kysely<DB>, lone: <T>(statement: () => Promise<T>) => Promise<T>): FastPaths {
  let fast = made.get(db);
  if (!fast) {
    fast = {
      alone: (statement) => lone(() => statement(db)),
      submitOne: (s) => lone(() => submitOne(db, s)),
      submitGathered: (s) => lone(() => submitGathered(db, s)),
      submitClaim: (s, c) => lone(() => submitClaim(db, s, c)),
      claimMany: (c) => lone(() => claimMany(db, c)),
      completeMany: (c) => lone(() => completeMany(db, c)),
      // Inside the caller's transaction: a conflict ends that transaction, which is retried whole.
      takeRows: async (tx, t) =>
        (
          await sql<ExecutionRow>`SELECT * FROM baton_take_rows(${t.ids}::text[], ${t.tokens}::text[], ${t.owner}, ${t.now}::bigint)`.execute(
            tx,
          )
        ).rows,
      lockPools: (tx, names) => lockPools(tx, names),
      lockAgent: async (tx, agent, read) => {
        const { rows } = read
          ? await sql<LockedRow>`SELECT (f.agent).*, f.running AS _running, f.pool_budgeted AS _pool_budgeted,
              f.candidates AS _candidates, f.pools AS _pools FROM baton_lock_agent(${agent}, ${read.limit}::int, ${read.now}::bigint) f`.execute(
              tx,
            )
          : await sql<LockedRow>`SELECT (f.agent).*,
              f.running AS _running, f.pool_budgeted AS _pool_budgeted FROM baton_lock_agent(${agent}) f`.execute(tx);
        return rows.length === 0 ? undefined : lockedAgent(rows[0]!);
      },
      // A row per agent found, then one row with no agent carrying the pools, where any was locked.
      lockAdmissions: async (tx, items) => {
        const { rows } = await sql<LockedRow & { _queued: boolean | null }>`SELECT (f.agent).*, f.running AS _running,
            f.pool_budgeted AS _pool_budgeted, f.candidates AS _candidates, f.pools AS _pools, f.queued AS _queued
          FROM baton_lock_agents(${items.map((i) => i.agent)}::text[], ${items.map((i) => i.limit)}::int[],
            ${items.map((i) => i.now)}::bigint[]) f`.execute(tx);
        const agents = new Map<string, LockedAgent>();
        let pools: LockedPools | undefined;
        for (const { _queued, ...r } of rows) {
          if (r.name === null) pools = r._pools ? lockedPools(r._pools) : undefined;
          // Object.assign, not spreads in a literal: V8's slow path on Node 20 (engine/transitions/create.ts queuedValues).
          else
            agents.set(
              r.name,
              Object.assign(lockedAgent(Object.assign({}, r, { _pools: null })), _queued === null ? {} : { queued: _queued }),
            );
        }
        return { agents, pools };
      },
      admitWrites: (tx, w) => admitWrites(tx, w),
    };
    made.set(db, fast);
  }
  return fast;
}

type LockedRow = AgentRow & {
  _running: Record<string, number> | null;
  _pool_budgeted: boolean;
  _candidates?: LockedCandidate[];
  _pools?: LockedPoolRow[] | null;
};

/** A row of baton_lock_agent as FastPaths.lockAgent answers it. */
function lockedAgent(r: LockedRow): LockedAgent {
  const { _running, _pool_budgeted, _candidates, _pools, ...row } = r;
  return {
    row,
    running: new Map(Object.entries(_running ?? {})),
    poolBudgeted: _pool_budgeted,
    ...(_candidates ? { candidates: _candidates.map(candidateOf) } : {}),
    ...(_pools ? { pools: lockedPools(_pools) } : {}),
  };
}

/** A candidate as baton_lock_agent's JSON carries it (numbers as JSON numbers), with candidatesFor's columns only. */
const candidateOf = (c: LockedCandidate): LockedCandidate => ({
  id: c.id,
  lease_ttl_seconds: Number(c.lease_ttl_seconds),
  timeout_seconds: Number(c.timeout_seconds),
  serial_key: c.serial_key,
  flow_key: c.flow_key,
  fair_round: Number(c.fair_round),
  bytes: Number(c.bytes),
});

/**
 * A plain submit as one statement (`baton_submit`): the new-work turn, backlog check, row (a keyed
 * one with its fairness round, by baton_key_rounds as StoreAdapter.keyRounds takes it) and creation
 * audit that transitions/create.ts createExecutions makes with `check` under lockAgentsForNewWork
 * in four round trips (five with a key). The agent's contract defaults come from the agent row
 * it locks. test/cost/one-statement.test.ts holds its rows equal to the transaction path's.
 */
async function submitOne(db: Kysely<DB>, s: SubmitRequest): Promise<Submitted> {
  const { f, now, actor } = s;
  try {
    // Whether the agent is paused rides along (the submit's answer says so): read at the
    // statement's start, as a read just before the submit would.
    const call = sql`baton_submit(${f.id}, ${f.agent}, ${f.trigger_kind}, ${f.origin}, ${f.message}, ${f.payload}, ${f.priority}::int,
      ${f.run_after ?? null}::bigint, ${f.idempotency_key ?? null}, ${f.retry_policy}, ${now}::bigint, ${actor}, ${s.auditDetail},
      ${f.flow_key ?? null})`;
    const { rows } = await sql<ExecutionRow & { _agent_paused: boolean }>`SELECT e.*, a.paused_at IS NOT NULL AS _agent_paused
      FROM ${call} e LEFT JOIN agents a ON a.name = e.agent`.execute(db);
    const { _agent_paused, ...row } = rows[0]!;
    return { row, agentPaused: _agent_paused === true };
  } catch (err: any) {
    if (err?.code === 'BTNOA') throw new NotFound('agent', f.agent);
    if (err?.code === 'BTFUL') throw new BacklogFull(f.agent, Number(err.detail));
    throw err;
  }
}

/** The arguments of `baton_submit_many` for `items`, one array per column. */
function submitColumns(items: readonly SubmitRequest[]) {
  const column = <T>(get: (i: SubmitRequest) => T) => items.map(get);
  return sql`${column((i) => i.f.id)}::text[], ${column((i) => i.f.agent)}::text[],
    ${column((i) => i.f.trigger_kind)}::text[], ${column((i) => i.f.origin)}::text[], ${column((i) => i.f.message)}::text[],
    ${column((i) => i.f.payload)}::text[], ${column((i) => i.f.priority)}::int[], ${column((i) => i.f.run_after ?? null)}::bigint[],
    ${column((i) => i.f.idempotency_key ?? null)}::text[], ${column((i) => i.f.retry_policy)}::text[], ${column((i) => i.now)}::bigint[],
    ${column((i) => i.actor)}::text[], ${column((i) => i.auditDetail)}::text[], ${column((i) => i.f.flow_key ?? null)}::text[]`;
}

/** Plain submits in one call (`baton_submit_many`): the call's rows in one INSERT (FastPaths.submitGathered). */
async function submitGathered(db: Kysely<DB>, items: readonly SubmitRequest[]): Promise<Map<string, Submitted>> {
  const { rows } = await sql<ExecutionRow & { _agent_paused: boolean }>`SELECT e.*, a.paused_at IS NOT NULL AS _agent_paused
    FROM baton_submit_many(${submitColumns(items)}) e LEFT JOIN agents a ON a.name = e.agent`.execute(db);
  return new Map(rows.map(({ _agent_paused, ...row }) => [row.id, { row, agentPaused: _agent_paused === true }]));
}

/**
 * Plain submits and the claims of claimers parked on their agents in one call
 * (`baton_submit_claim`: `baton_submit_many`, then `baton_claim_many`), so one commit makes both
 * durable (FastPaths.submitClaim). Whether each submit's agent was paused is read at the
 * statement's start, as submitGathered reads it; the function returns rows in its own order
 * (the submits', then the claims' as claimMany reads them), which a scalar read keeps.
 */
async function submitClaim(
  db: Kysely<DB>,
  items: readonly SubmitRequest[],
  claims: readonly ClaimRequest[],
): Promise<{ submitted: Map<string, Submitted>; claimed: Map<string, ExecutionRow[]> }> {
  const { rows } = await sql<ClaimedRow & { _agent_paused: boolean | null }>`SELECT f.claim_agent, f.claim_state, (f.claimed).*,
      CASE WHEN f.claim_state = 'submitted' THEN (SELECT a.paused_at IS NOT NULL FROM agents a WHERE a.name = (f.claimed).agent) END
        AS _agent_paused
    FROM baton_submit_claim(${submitColumns(items)}, ${claimColumns(claims)}) f`.execute(db);
  const submitted = new Map<string, Submitted>();
  const rest: ClaimedRow[] = [];
  for (const { _agent_paused, ...r } of rows) {
    if (r.claim_state !== 'submitted') rest.push(r);
    else {
      const { claim_agent: _a, claim_state: _s, ...row } = r;
      submitted.set(row.id, { row: row as ExecutionRow, agentPaused: _agent_paused === true });
    }
  }
  return { submitted, claimed: claimedBy(rest, claims) };
}

/**
 * Claims of many agents in one call (`baton_claim_many`; a lone claim is a call of one). Exactness
 * is the transaction path's: each agent row is locked first, in name order, its candidates locked
 * SKIP LOCKED and limited by its free seats, each update re-checking `queued`, and the event
 * trigger adds each seat under the same lock. test/cost/plans.test.ts reads the function's own plans,
 * custom and generic: candidates through executions_admission, each taken row by position. The
 * function plans without sorting, so a connection that made its plans while the store was young
 * cannot have kept one that reads every queued row, sorted, for each agent
 * (test/cost/claim-plan-young.test.ts).
 */
async function claimMany(db: Kysely<DB>, items: readonly ClaimRequest[]): Promise<Map<string, ExecutionRow[]>> {
  const { rows } =
    await sql<ClaimedRow>`SELECT f.claim_agent, f.claim_state, (f.claimed).* FROM baton_claim_many(${claimColumns(items)}) f`.execute(db);
  return claimedBy(rows, items);
}

/**
 * A row of `baton_claim_many`: a row taken, or the end of an agent's answer: decided, decided with
 * no queued row of the agent left ('empty': none found, or its backlog counters say the claim took
 * the last one), or undecided.
 */
type ClaimedRow = ExecutionRow & { claim_agent: string; claim_state: 'row' | 'decided' | 'empty' | 'undecided' | 'submitted' };

/** The arguments of `baton_claim_many` for `items`, each with a new lease token per row it may take. */
function claimColumns(items: readonly ClaimRequest[]) {
  const tokens: string[] = [];
  const from: number[] = [];
  for (const item of items) {
    from.push(tokens.length + 1);
    for (let k = 0; k < item.max; k++) tokens.push(newLeaseToken());
  }
  const column = <K extends keyof ClaimRequest>(k: K) => items.map((i) => i[k]);
  return sql`${column('id')}::text[], ${column('delivery')}::text[], ${column('owner')}::text[],
    ${items.map((i) => Math.max(0, i.max))}::int[], ${tokens}::text[], ${from}::int[], ${column('now')}::bigint[],
    ${CLAIM_STAMP_EVERY_MS}::bigint, ${items.map((i) => i.maxBytes ?? CONTRACT_DEFAULTS.claimAnswerBytes)}::bigint[],
    ${items.map((i) => i.keyId ?? null)}::text[]`;
}

/**
 * `baton_claim_many`'s rows, in its order, by agent: the rows each decided agent took (an undecided
 * agent is left out). The request of an agent whose queue was empty is told (its onNothingQueued).
 */
function claimedBy(rows: readonly ClaimedRow[], items: readonly ClaimRequest[]): Map<string, ExecutionRow[]> {
  const out = new Map<string, ExecutionRow[]>();
  const taken = new Map<string, ExecutionRow[]>();
  for (const { claim_agent, claim_state, ...row } of rows) {
    if (claim_state === 'row') {
      const list = taken.get(claim_agent) ?? [];
      list.push(row as ExecutionRow);
      taken.set(claim_agent, list);
    } else if (claim_state === 'decided' || claim_state === 'empty') {
      out.set(claim_agent, taken.get(claim_agent) ?? []);
      if (claim_state === 'empty') items.find((i) => i.id === claim_agent)?.onNothingQueued?.();
    }
  }
  return out;
}

/**
 * Completions in one call (`baton_complete_many`), which locks the execution rows first, then
 * updates each by primary key with the lease guards and the facts, in agent name order.
 */
async function completeMany(db: Kysely<DB>, items: readonly CompletionRequest[]): Promise<Map<string, ExecutionRow>> {
  if (items.length === 0) return new Map();
  const column = <K extends keyof CompletionRequest>(k: K) => items.map((v) => v[k]);
  const { rows } = await sql<ExecutionRow>`SELECT * FROM baton_complete_many(${column('id')}::text[], ${column('token')}::text[],
    ${column('status')}::text[], ${column('now')}::bigint[], ${column('actor')}::text[], ${column('result')}::text[],
    ${column('error_code')}::text[], ${column('error_message')}::text[], ${column('usage')}::text[], ${column('reason')}::text[])`.execute(
    db,
  );
  return new Map(rows.map((r) => [r.id, r]));
}

/**
 * FastPaths.admitWrites in one statement: the agent rows in one UPDATE and the waits ended in one
 * DELETE, then every take as one call of baton_take_rows per agent, each on its slice of the ids
 * and tokens, in the order given (a lateral call per element of the unnest, which yields them in
 * order). The UPDATE and DELETE are CTEs the takes wait for (a one-time filter on their counts,
 * evaluated before the first row is read): each take's event trigger then writes the agent row
 * after it, in a later command of the statement, as it would after the UPDATE sent alone.
 */
async function admitWrites(tx: Kysely<DB>, w: AdmitWrites): Promise<ExecutionRow[]> {
  const a = w.agents;
  const ends = (w.ends ?? []).flatMap((e) => e.pools.map((pool) => ({ agent: e.agent, pool })));
  const ctes = [
    ...(a.length === 0
      ? []
      : [
          sql`stamped AS (UPDATE agents x SET last_claim_at = coalesce(v.stamp, x.last_claim_at), admit_round = greatest(x.admit_round, coalesce(v.round, 0))
      FROM unnest(${a.map((i) => i.agent)}::text[], ${a.map((i) => i.stamp)}::bigint[], ${a.map((i) => i.round)}::bigint[]) AS v(name, stamp, round)
      WHERE x.name = v.name RETURNING 1)`,
        ]),
    ...(ends.length === 0
      ? []
      : [
          sql`ended AS (DELETE FROM pool_waits x USING unnest(${ends.map((e) => e.agent)}::text[], ${ends.map((e) => e.pool)}::text[]) AS v(agent, pool)
      WHERE x.agent = v.agent AND x.pool = v.pool RETURNING 1)`,
        ]),
  ];
  const first = ctes.length === 0 ? undefined : sql`WITH ${sql.join(ctes)}`;
  const after = sql.join(
    [
      ...(a.length === 0 ? [] : [sql`(SELECT count(*) FROM stamped) >= 0`]),
      ...(ends.length === 0 ? [] : [sql`(SELECT count(*) FROM ended) >= 0`]),
    ],
    sql` AND `,
  );
  if (w.takes.length === 0) {
    // Data-modifying CTEs run to completion whether or not the query reads them.
    if (first) await sql`${first} SELECT 1`.execute(tx);
    return [];
  }
  const lo: number[] = [];
  const hi: number[] = [];
  for (const t of w.takes) {
    lo.push(lo.length === 0 ? 1 : hi[hi.length - 1]! + 1);
    hi.push(lo[lo.length - 1]! + t.ids.length - 1);
  }
  const takes = sql`SELECT t.* FROM unnest(${w.takes.map((t) => t.owner)}::text[], ${w.takes.map((t) => t.now)}::bigint[],
      ${lo}::int[], ${hi}::int[]) WITH ORDINALITY AS a(owner, now, lo, hi, n)
    CROSS JOIN LATERAL baton_take_rows((${w.takes.flatMap((t) => t.ids)}::text[])[a.lo:a.hi],
      (${w.takes.flatMap((t) => t.tokens)}::text[])[a.lo:a.hi], a.owner, a.now) t`;
  const { rows } = first
    ? await sql<ExecutionRow>`${first} ${takes} WHERE ${after}`.execute(tx)
    : await sql<ExecutionRow>`${takes}`.execute(tx);
  return rows;
}

/** FastPaths.lockPools: one call of baton_lock_pools (a row per pool, then a row per wait). */
async function lockPools(tx: Kysely<DB>, names: readonly string[]): Promise<LockedPools> {
  const { rows } = await sql<LockedPoolRow>`SELECT * FROM baton_lock_pools(${[...names]}::text[])`.execute(tx);
  return lockedPools(rows);
}
