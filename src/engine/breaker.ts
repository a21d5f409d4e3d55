import {
  BREAKER_ALERT,
  breakerAlertBody,
  breakerOnOutcome,
  breakerOutcome,
  BREAKER_CLOSED,
  type BreakerChange,
  type BreakerColumns,
  type BreakerPatch,
} from '../domain/breaker.ts';
import { sql } from 'kysely';
import type { AlertSinkKind } from '../domain/canary.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import { listSlots, listValues, perStore, preparedQuery } from '../store/prepared-query.ts';
import { appendAudit } from './audit.ts';
import { queueAlerts } from './alerts.ts';
import { factsMayChange, poolBudgeted, refreshFastPathFacts, subscribedAsSource } from './fast-path-facts.ts';

/** The breaker columns, as read with the agent row locked. */
export const BREAKER_COLUMNS = [
  'breaker_config',
  'breaker_state',
  'breaker_consecutive',
  'breaker_recent',
  'breaker_opened_at',
  'breaker_until',
  'breaker_probe_id',
  'breaker_cooldown_ms',
] as const;

/** An ended execution, as the breaker needs it. */
export interface Ended {
  id: string;
  agent: string;
  status: string;
  error_code: string | null;
  /** When it ended and by whom, where ended executions counted together differ (else the call's). */
  ended?: { now: number; actor: string };
}

/**
 * Count ended executions toward their agents' breakers, inside the transaction that ended them.
 * Each agent row is locked (the lock admission takes), so concurrent completions count one after
 * the other. Agents are locked in name order: a reaper pass ends rows of many agents, and two
 * passes taking their agents in different orders could wait on each other in a cycle.
 */
export async function countTowardBreakers(
  tx: Tx,
  store: StoreAdapter,
  ended: Ended[],
  now: number,
  actor: string,
  sinks: readonly AlertSinkKind[],
  /** Breaker columns the caller read already in this transaction, by agent (see readCompletionProfile). */
  known?: ReadonlyMap<string, BreakerColumns>,
  /** Whether `known` was read with those agents' rows already locked (admission's lock) in this transaction. */
  knownLocked = false,
): Promise<void> {
  const relevant = ended.filter((e) => breakerOutcome(e.status, e.error_code) !== null);
  const agents = [...new Set(relevant.map((e) => e.agent))].sort();
  // The patches that leave the facts as they are, by shape (the columns they set), written after the loop.
  const plain = new Map<string, Array<BreakerPatch & { agent: string }>>();
  for (const agent of agents) {
    // Read without a lock first: an agent with the breaker off costs one primary-key read and
    // takes no lock, and so does an outcome that changes nothing (a success while the breaker is
    // closed with nothing but successes in its window: the steady state). Skipping the write then
    // is the same as counting it just before whatever commits next; anything else is counted
    // again below under the lock admission takes.
    const seen = known?.get(agent) ?? (await tx.selectFrom('agents').select(BREAKER_COLUMNS).where('name', '=', agent).executeTakeFirst());
    if (!seen || seen.breaker_config === null) continue;
    if (relevant.every((e) => e.agent !== agent || changesNothing(seen, e, e.ended?.now ?? now))) continue;
    const [row] = knownLocked && known?.has(agent) ? [seen] : await lockedBreaker(store)(tx, { agent });
    if (!row) continue;
    let state = row;
    let patch: BreakerPatch = {};
    for (const e of relevant.filter((x) => x.agent === agent)) {
      const at = e.ended ?? { now, actor };
      const step = breakerOnOutcome(state, e.id, breakerOutcome(e.status, e.error_code), at.now);
      if (!step) continue;
      // Object.assign, not spreads in a literal: V8's slow path on Node 20 (create.ts queuedValues).
      patch = Object.assign({}, patch, step.patch);
      state = Object.assign({}, state, step.patch);
      if (step.change) await recordBreakerChange(tx, agent, step.change, at.actor, at.now, sinks, e.id);
    }
    // The facts change with the breaker only where it closes, opens, or its window turns clean or not.
    if (factsMayChange(row, patch)) await refreshFastPathFacts(tx, agent, { pending: patch });
    else {
      // The columns set, as Kysely's set() takes them (an undefined value is left out).
      const columns = Object.keys(patch).filter((c) => patch[c as keyof BreakerPatch] !== undefined);
      if (columns.length > 0) {
        const shape = columns.join(',');
        const same = plain.get(shape);
        const write = Object.assign({}, patch, { agent });
        if (same) same.push(write);
        else plain.set(shape, [write]);
      }
    }
  }
  // Each agent's row is written once, here or above, and nothing between reads what these set.
  for (const [shape, patches] of plain) {
    if (patches.length > 1 && store.kind === 'postgres') await writeBreakers(tx, patches, shape);
    else for (const p of patches) await writeBreaker(tx, p, shape);
  }
}

/** The PostgreSQL type of each breaker column a patch sets, for writeBreakers' arrays. */
const PG_TYPES: Record<keyof BreakerPatch, string> = {
  breaker_state: 'text',
  breaker_consecutive: 'int',
  breaker_recent: 'text',
  breaker_opened_at: 'bigint',
  breaker_until: 'bigint',
  breaker_probe_id: 'text',
  breaker_cooldown_ms: 'bigint',
};

/**
 * writeBreaker for the patches of several agents of one shape, in one statement (PostgreSQL: the
 * values as arrays, one UPDATE … FROM unnest): completions committed together while their agents'
 * breaker windows fill write each agent's window, one round trip for all of them. Agents distinct.
 */
async function writeBreakers(tx: Tx, patches: ReadonlyArray<BreakerPatch & { agent: string }>, shape: string): Promise<void> {
  const columns = shape.split(',') as Array<keyof BreakerPatch>;
  const arrays = [
    sql`${patches.map((p) => p.agent)}::text[]`,
    ...columns.map((c) => sql`${patches.map((p) => p[c] ?? null)}::${sql.raw(PG_TYPES[c])}[]`),
  ];
  const names = sql.join([sql.ref('agent'), ...columns.map((c) => sql.ref(c))]);
  await sql`UPDATE agents SET ${sql.join(columns.map((c) => sql`${sql.ref(c)} = ${sql.ref(`v.${c}`)}`))}
    FROM unnest(${sql.join(arrays)}) AS v(${names}) WHERE agents.name = v.agent`.execute(tx);
}

/** countTowardBreakers' locked read of an agent's breaker, built once per store (its row lock differs). */
const lockedBreaker = perStore((store) =>
  preparedQuery((tx: Tx, p: { agent: string }) =>
    store.lockRows(tx.selectFrom('agents').select(BREAKER_COLUMNS).where('name', '=', p.agent), 'admission'),
  ),
);

/**
 * countTowardBreakers' write of a patch that leaves the fast-path facts as they are, built once per
 * shape (the columns it sets, comma-separated): a closed breaker's window filling is one shape.
 */
const writeBreaker = preparedQuery((tx: Tx, p: BreakerPatch & { agent: string }, shape: string) => {
  const set: Record<string, unknown> = {};
  for (const c of shape.split(',')) set[c] = p[c as keyof BreakerPatch];
  return tx.updateTable('agents').set(set).where('name', '=', p.agent);
});

/** Whether counting `e` on a breaker in state `row` would leave every column as it is. */
function changesNothing(row: BreakerColumns, e: Ended, now: number): boolean {
  const step = breakerOnOutcome(row, e.id, breakerOutcome(e.status, e.error_code), now);
  if (!step) return true;
  if (step.change) return false;
  return Object.entries(step.patch).every(([k, v]) => row[k as keyof BreakerColumns] === v);
}

/** Every breaker change: an audit row `agent.breaker` (from, to, why) and one alert per configured sink. */
export async function recordBreakerChange(
  tx: Tx,
  agent: string,
  change: BreakerChange,
  actor: string,
  now: number,
  sinks: readonly AlertSinkKind[],
  executionId: string | null = null,
): Promise<void> {
  await appendAudit(tx, {
    at: now,
    actor,
    action: 'agent.breaker',
    subject: agent,
    execution_id: executionId,
    detail: { from: change.from, to: change.to, why: change.why, until: change.until, cooldown_ms: change.cooldown_ms },
  });
  await queueAlerts(tx, sinks, {
    invariant: BREAKER_ALERT,
    transition: change.to === 'closed' ? 'resolved' : 'violated',
    now,
    body: (sink) => breakerAlertBody(sink, agent, change, actor, now),
  });
}

/**
 * An operator closes the breaker by hand: counters start afresh and admission resumes at once.
 * Under the agent row's lock (the one admission takes), so no admission in any process still
 * sees it open afterwards. Returns whether it changed (closing a closed breaker is a no-op).
 */
export async function closeBreaker(
  tx: Tx,
  store: StoreAdapter,
  agent: string,
  now: number,
  actor: string,
  sinks: readonly AlertSinkKind[],
): Promise<boolean> {
  const row = await store
    .lockRows(tx.selectFrom('agents').select(BREAKER_COLUMNS).where('name', '=', agent), 'admission')
    .executeTakeFirst();
  if (!row) return false;
  // Reset the counters even when closed: an operator who fixed the cause wants a fresh count.
  await refreshFastPathFacts(tx, agent, { pending: BREAKER_CLOSED });
  if (row.breaker_state === 'closed') return false;
  await recordBreakerChange(
    tx,
    agent,
    { from: row.breaker_state, to: 'closed', why: 'closed_by_operator', until: null, cooldown_ms: null },
    actor,
    now,
    sinks,
  );
  return true;
}

/** What a completion's follow-up work needs to know of its agent: budget, breaker, whether any subscription listens. */
export interface CompletionProfile extends BreakerColumns {
  budget: string | null;
  /** The pools it draws from (their budgets are spent by its completions). */
  pools: string | null;
  /** Whether an enabled subscription has this agent as its source (else following its outcome reads none). */
  subscribed: boolean;
  /** Whether a pool it draws from has a budget (else spending its pools' budgets reads none). */
  pool_budgeted: boolean;
}

/** readCompletionProfile's statement, built once (preparedQuery). */
const completionProfile = preparedQuery((tx: Tx, p: { agent: string }) =>
  tx
    .selectFrom('agents')
    .select(['budget', 'pools', ...BREAKER_COLUMNS])
    .select(subscribedAsSource)
    .select(poolBudgeted)
    .where('name', '=', p.agent),
);

/** readCompletionProfiles' statement, compiled once per number of agents (preparedQuery). */
const completionProfiles = preparedQuery((tx: Tx, p: Record<string, string>, n: number) =>
  tx
    .selectFrom('agents')
    .select(['name', 'budget', 'pools', ...BREAKER_COLUMNS])
    .select(subscribedAsSource)
    .select(poolBudgeted)
    .where('name', 'in', listSlots(p, n)),
);

/**
 * The agent's budget, breaker columns, whether it has enabled subscriptions and whether a pool of
 * it has a budget, in one primary-key read (the budget ledger, the pools' ledgers, the breaker and
 * the chains would each read it otherwise). Unlocked,
 * like each of those first reads; undefined when the agent is gone.
 */
export async function readCompletionProfile(tx: Tx, agent: string): Promise<CompletionProfile | undefined> {
  const [row] = await completionProfile(tx, { agent });
  return row && profileOf(row);
}

/** readCompletionProfile for several agents in one read, by name (an agent that is gone is left out). */
export async function readCompletionProfiles(tx: Tx, agents: readonly string[]): Promise<Map<string, CompletionProfile>> {
  if (agents.length === 0) return new Map();
  const rows = await completionProfiles(tx, listValues(agents), agents.length);
  return new Map(rows.map(({ name, ...row }) => [name, profileOf(row)]));
}

// EXISTS comes back as 1/0 on SQLite and a boolean on PostgreSQL.
const profileOf = <R extends { subscribed: unknown; pool_budgeted: unknown }>(row: R) =>
  Object.assign({}, row as Omit<R, 'subscribed' | 'pool_budgeted'>, {
    subscribed: Boolean(row.subscribed),
    pool_budgeted: Boolean(row.pool_budgeted),
  });
