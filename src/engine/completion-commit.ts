import type { AlertSinkKind } from '../domain/canary.ts';
import { BatonError } from '../domain/errors.ts';
import type { StoredOutcome } from '../domain/outcomes.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import { listSlots, listValues, perStore, preparedQuery } from '../store/prepared-query.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { countTowardBreakers, readCompletionProfile, readCompletionProfiles, type CompletionProfile } from './breaker.ts';
import { accrueBudget } from './budget.ts';
import { setRecent } from './bounded.ts';
import type { Followed } from './composition/follow.ts';
import { Gathered } from './gather.ts';
import { accruePoolBudgets } from './pool-budget.ts';
import { completeManyWithLease, completeWithLease } from './transitions/complete.ts';
import { explainRefusal } from './transitions/lease.ts';
import { insertRetry } from './transitions/retry.ts';

/** A completion that takes the engine's transaction (its outcome redacted, its time taken). */
export interface CompletionJob {
  id: string;
  token: string;
  outcome: StoredOutcome;
  now: number;
  actor: string;
}

/** A completion committed with what it caused: announce them all after the commit. */
export interface Committed {
  row: ExecutionRow;
  retry?: ExecutionRow;
  followed: Followed;
}

/** What a completion's transaction needs of the engine. */
export interface CompletionContext {
  store: StoreAdapter;
  alertSinks: readonly AlertSinkKind[];
  follow(tx: Tx, now: number, actor: string, rows: readonly ExecutionRow[], unsubscribed?: ReadonlySet<string>): Promise<Followed>;
}

/**
 * The completion commits with what it causes: its budget spending, its breaker count, the retry
 * its policy asks for (a crash loses neither the failure nor its retry), and the work its final
 * outcome starts. One read of the agent tells which of those need more statements.
 */
export async function commitCompletion(tx: Tx, c: CompletionContext, job: CompletionJob): Promise<Committed> {
  return whatItCauses(tx, c, job, await completeWithLease(tx, job.id, job.token, job.outcome, job.now, job.actor));
}

async function whatItCauses(tx: Tx, c: CompletionContext, job: CompletionJob, done: ExecutionRow): Promise<Committed> {
  const { now, actor } = job;
  const agent = await readCompletionProfile(tx, done.agent);
  await accrueBudget(tx, done, now, c.alertSinks, agent ? agent.budget : null);
  await accruePoolBudgets(tx, done, now, agent?.pool_budgeted ? agent.pools : null);
  await countTowardBreakers(tx, c.store, [done], now, actor, c.alertSinks, agent && new Map([[done.agent, agent]]));
  return followUp(tx, c, job, done, agent);
}

/** The retry a failure's policy asks for, and the work its final outcome starts. */
async function followUp(
  tx: Tx,
  c: CompletionContext,
  job: CompletionJob,
  done: ExecutionRow,
  agent?: CompletionProfile,
): Promise<Committed> {
  const { now, actor } = job;
  const retry = done.status === 'failed' ? await insertRetry(tx, c.store, done, now, actor) : undefined;
  // With a retry to come the failure is not final: the retry's outcome is followed instead.
  const unsubscribed = agent?.subscribed ? undefined : new Set([done.agent]);
  return { row: done, retry, followed: await c.follow(tx, now, actor, retry ? [] : [done], unsubscribed) };
}

/** A gathered completion's answer: committed, or refused by its compare-and-set (it wrote nothing). */
type Landed = { committed: Committed } | { refused: BatonError };

/**
 * Shared transactions out at once. One would hold every completion of this kind behind the
 * statements of the one out, one after another on one connection; a few keep them moving while
 * one commits. Each locks its agents in name order first, so they never wait on each other in a cycle.
 */
const LANES = 4;

/** Rows leased in this process whose agents a completion's lane is chosen by: the latest, at most this many. */
const LEASED_KEPT = 20_000;

/**
 * Completions that take the engine's transaction, those asked for together (one turn, or while a
 * transaction of them is out) in one transaction: on PostgreSQL one BEGIN and COMMIT and one
 * connection for all of them instead of one each, and their agents read and their breakers written
 * once for all of them (commitTogether). A completion alone is its own transaction.
 *
 * A completion of an agent that a lane holds (queued there or in its transaction out) goes to that
 * lane: each transaction locks its agents' rows first, so a second lane's transaction with that
 * agent would wait for the first's COMMIT holding the locks of every other agent it took (measured
 * under W1 with keys and pools: the lanes' transactions waiting on each other were about half a
 * connection's time). Any other goes to the first lane with no transaction out, or, when all have
 * one, to the next in turn. The agent is known from the rows this process leased (`leased`); a
 * completion of a row leased elsewhere is placed without it, and its transaction may wait, in lock
 * order, as before.
 */
export function gatheredCompletions(c: CompletionContext): {
  run(job: CompletionJob): Promise<Committed>;
  leased(rows: readonly ExecutionRow[]): void;
} {
  const alone = async (job: CompletionJob): Promise<Landed> => ({
    committed: await c.store.transaction((tx) => commitCompletion(tx, c, job)),
  });
  const lanes = Array.from(
    { length: LANES },
    () =>
      new Gathered<CompletionJob, Landed>({
        many: (jobs) => c.store.transaction((tx) => commitTogether(tx, c, jobs)),
        one: alone,
        // An execution the agents' read did not find: alone, which says why.
        absent: alone,
      }),
  );
  const agentOf = new Map<string, string>();
  const held = new Map<string, { lane: Gathered<CompletionJob, Landed>; n: number }>();
  let next = 0;
  return {
    leased(rows) {
      // Rows completed elsewhere or released leave entries behind: the oldest go at the bound.
      for (const r of rows) setRecent(agentOf, r.id, r.agent, LEASED_KEPT);
    },
    async run(job) {
      const agent = agentOf.get(job.id);
      agentOf.delete(job.id);
      const holding = agent === undefined ? undefined : held.get(agent);
      const lane = holding?.lane ?? lanes.find((l) => !l.out) ?? lanes[next++ % LANES]!;
      if (agent !== undefined) held.set(agent, { lane, n: (holding?.n ?? 0) + 1 });
      let landed: Landed;
      try {
        landed = await lane.run(job);
      } finally {
        const h = agent === undefined ? undefined : held.get(agent);
        if (h && --h.n === 0) held.delete(agent!);
      }
      if ('refused' in landed) throw landed.refused;
      return landed.committed;
    },
  };
}

/** commitTogether's read of its executions' agents, compiled once per number of them (preparedQuery). */
const agentsOfExecutions = preparedQuery((tx: Tx, p: Record<string, string>, n: number) =>
  tx.selectFrom('executions').select(['id', 'agent']).where('id', 'in', listSlots(p, n)),
);

/** commitTogether's lock of its agents' rows in name order, compiled once per store (its row lock) and number of them. */
const lockAgents = perStore((store) =>
  preparedQuery((tx: Tx, p: Record<string, string>, n: number) =>
    store.lockRows(tx.selectFrom('agents').select('name').where('name', 'in', listSlots(p, n)).orderBy('name'), 'admission'),
  ),
);

/**
 * Many completions in one transaction. Their agents' rows are locked first, in name order (the
 * order admission locks agents in; a completion writes its agent's row), so two transactions never
 * wait on each other the wrong way round, and what the completions then read of their agents (the
 * breaker) stays as read until the commit: the breaker's count needs no locked read of its own.
 * The compare-and-sets go first (one statement on PostgreSQL), then one read of their agents, each completion's spending, one
 * count on each agent's breaker (its completions in turn, as one after the other would count),
 * then each one's retry and follow-up work: statements a batch, not a completion, where they can.
 * An item whose compare-and-set is refused gets that refusal, as alone; any other error fails the
 * transaction, and each item is then committed alone (gather.ts).
 */
async function commitTogether(tx: Tx, c: CompletionContext, jobs: readonly CompletionJob[]): Promise<Map<string, Landed>> {
  const ids = jobs.map((j) => j.id);
  const rows = await agentsOfExecutions(tx, listValues(ids), ids.length);
  const agentOf = new Map(rows.map((r) => [r.id, r.agent]));
  const order = jobs
    .filter((j) => agentOf.has(j.id))
    .sort((a, b) => (agentOf.get(a.id)! < agentOf.get(b.id)! ? -1 : agentOf.get(a.id)! > agentOf.get(b.id)! ? 1 : a.id < b.id ? -1 : 1));
  const out = new Map<string, Landed>();
  if (order.length === 0) return out;
  const agents = [...new Set(order.map((j) => agentOf.get(j.id)!))].sort();
  await lockAgents(c.store)(tx, listValues(agents), agents.length);
  // On PostgreSQL the compare-and-sets are one statement (a round trip each saved); on SQLite, where
  // a statement costs no round trip, one each. Either way `landed` keeps the order above.
  const together = c.store.kind === 'postgres' ? await completeManyWithLease(tx, order) : undefined;
  const landed: Array<{ job: CompletionJob; done: ExecutionRow }> = [];
  for (const job of order) {
    try {
      const done = together ? together.get(job.id) : await completeWithLease(tx, job.id, job.token, job.outcome, job.now, job.actor);
      landed.push({ job, done: done ?? (await explainRefusal(tx, job.id, job.token, true)) });
    } catch (err) {
      // A refusal reads and throws: nothing was written, the transaction goes on.
      if (!(err instanceof BatonError)) throw err;
      out.set(job.id, { refused: err });
    }
  }
  if (landed.length === 0) return out;
  // What the completions cause, their agents read once for all of them: locked above, so each
  // row stays as read but for what the breakers write below, which counts them in turn.
  const profiles = await readCompletionProfiles(tx, [...new Set(landed.map((l) => l.done.agent))]);
  for (const { job, done } of landed) {
    const agent = profiles.get(done.agent);
    await accrueBudget(tx, done, job.now, c.alertSinks, agent ? agent.budget : null);
    await accruePoolBudgets(tx, done, job.now, agent?.pool_budgeted ? agent.pools : null);
  }
  // Each counted with its own time and actor, an agent's in their order: one write an agent.
  // What the breaker reads of each (Ended), not a copy of the whole row.
  const ended = landed.map(({ job, done }) => ({
    id: done.id,
    agent: done.agent,
    status: done.status,
    error_code: done.error_code,
    ended: { now: job.now, actor: job.actor },
  }));
  const first = landed[0]!.job;
  await countTowardBreakers(tx, c.store, ended, first.now, first.actor, c.alertSinks, profiles, true);
  for (const { job, done } of landed) out.set(job.id, { committed: await followUp(tx, c, job, done, profiles.get(done.agent)) });
  return out;
}
