import { sql, type ExpressionBuilder } from 'kysely';
import { AHEAD_COUNT_CAP, SEAT_HOLDERS_SHOWN, type WaitingView } from '../domain/admission.ts';
import { keyCap, keyLimits, type KeyLimitColumns, type KeyLimits } from '../domain/flow.ts';
import { afterStart, describeThrottle, emissionMs, nextStartAt, throttleAdmits } from '../domain/throttle.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { DB, NewExecution } from '../store/schema.ts';
import { preparedQuery } from '../store/prepared-query.ts';
import { inIndexOrder } from './candidates.ts';
import { statusIs } from './status-sql.ts';
import type { Executor } from './transitions/stamp.ts';
import { iso } from './views.ts';

/**
 * Concurrency keys in the admission and creation transactions (rules: src/domain/flow.ts).
 * Per-key state is read and written under the agent's admission lock, which admission already
 * holds, so caps and throttles are exact across processes.
 */

/**
 * Give keyed rows their fairness round, in the creator's transaction under the agents' new-work
 * turns: per key of the batch, its rounds taken at once (StoreAdapter.keyRounds, the one rule:
 * max(last_round + 1, agent.admit_round) onward). Rows without a key keep round 0. Returns the rows
 * (new objects where a round was set). `room`: a lone `check` row takes its round only while the
 * agent's backlog has room for it; null: it has none, and nothing was written.
 */
export async function assignRounds<R extends NewExecution>(
  tx: Tx,
  store: StoreAdapter,
  rows: readonly R[],
  room = false,
): Promise<readonly R[] | null> {
  let keyed = false;
  for (const r of rows) if (r.flow_key != null && r.status === 'queued') keyed = true;
  if (!keyed) return rows;
  const groups = new Map<string, R[]>();
  for (const r of rows) {
    if (r.flow_key == null || r.status !== 'queued') continue;
    const id = `${r.agent}\u0000${r.flow_key}`;
    const g = groups.get(id);
    if (g) g.push(r);
    else groups.set(id, [r]);
  }
  const round = new Map<R, number>();
  for (const g of groups.values()) {
    const { agent, flow_key } = g[0]!;
    const n = g.length;
    const last = await store.keyRounds(tx, { agent, key: flow_key!, n, room });
    if (last === null) return null;
    g.forEach((r, i) => round.set(r, last - n + 1 + i));
  }
  // Every row names its round when some do: a bulk insert writes the columns of all its rows, and
  // a row without the column would write null there, not the default.
  return rows.map((r) => Object.assign({}, r, { fair_round: round.get(r) ?? r.fair_round ?? 0 }));
}

/** The agent columns admission needs for keys. */
export type KeyAdmissionColumns = KeyLimitColumns & { admit_round: number };
export const KEY_ADMISSION_COLUMNS = ['admit_round', 'key_max_parallel', 'key_overrides', 'key_throttle'] as const;

/** Running tasks per key of an agent, through executions_key_running (at most its running count). */
const runningPerKeyQuery = preparedQuery((db: Tx, p: { agent: string }) =>
  db
    .selectFrom('executions')
    .select(['flow_key'])
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('agent', '=', p.agent)
    .where('status', '=', statusIs('running'))
    .where('flow_key', 'is not', null)
    .groupBy('flow_key'),
);

export async function runningPerKey(db: Tx, agent: string): Promise<Map<string, number>> {
  const rows = await runningPerKeyQuery(db, { agent });
  return new Map(rows.map((r) => [r.flow_key!, Number(r.n)]));
}

/**
 * SQLite: runningPerKey as a column of the admission's agent read (`key_running`, JSON pairs of
 * key and count; null where the agent has no key setting, and nothing is read for it), saving
 * admission a statement. Only SQLite: one statement reads one state there, and the admission
 * transaction is the only writer. On PostgreSQL the statement's snapshot is taken before the
 * agent's row lock is granted, so counts read in it could miss admissions that committed while
 * it waited (there, FastPaths.lockAgent reads them after the lock).
 */
export const keyRunningColumn = sql<string | null>`CASE WHEN agents.key_max_parallel IS NOT NULL
  OR agents.key_overrides IS NOT NULL OR agents.key_throttle IS NOT NULL THEN (
    SELECT json_group_array(json_array(k.flow_key, k.n)) FROM (
      SELECT e.flow_key, count(*) AS n FROM executions e
      WHERE e.agent = agents.name AND e.status = ${statusIs('running')} AND e.flow_key IS NOT NULL
      GROUP BY e.flow_key) k) END`.as('key_running');

/** keyRunningColumn's value as runningPerKey's answer (undefined: not read). */
export function keyRunningOf(column: string | null | undefined): Map<string, number> | undefined {
  if (column == null) return undefined;
  return new Map((JSON.parse(column) as Array<[string, number]>).map(([k, n]) => [k, Number(n)]));
}

/**
 * One admission's view of an agent's keys: which keys are shut (full or throttled) before it
 * picks candidates, and, while it admits, whether each candidate's key still has room. Counts
 * rows admitted within the batch; `save` writes the throttles' new state.
 */
export class KeyGate {
  private readonly tats = new Map<string, number | null>();
  private readonly changed = new Set<string>();
  private constructor(
    private readonly agent: string,
    private readonly limits: KeyLimits,
    private readonly running: Map<string, number>,
    /** Keys shut before the candidates are read: the candidate query leaves their rows out. */
    readonly shut: string[],
    /** Whether some of them are shut by their throttle (not only by their cap). */
    private readonly throttleShut: boolean,
  ) {}

  /**
   * The gate of `agent` (null: no per-key limit), read under the agent's admission lock.
   * `running`: its running tasks per key, where the caller read them with the lock (else read here).
   */
  static async open(tx: Tx, agent: string, columns: KeyLimitColumns, now: number, known?: Map<string, number>): Promise<KeyGate | null> {
    const limits = keyLimits(columns);
    if (!limits) return null;
    const running = known ?? (await runningPerKey(tx, agent));
    const shut: string[] = [];
    for (const [key, n] of running) {
      const cap = keyCap(limits, key);
      if (cap !== null && n >= cap) shut.push(key);
    }
    const t = limits.throttle;
    if (t) {
      // Closed throttles: tat beyond now by more than the burst allows (throttleAdmits).
      const closed = await tx
        .selectFrom('flow_keys')
        .select('flow_key')
        .where('agent', '=', agent)
        .where('throttle_tat', '>', now + t.burst * emissionMs(t))
        .execute();
      for (const c of closed) if (!shut.includes(c.flow_key)) shut.push(c.flow_key);
      return new KeyGate(agent, limits, running, shut, closed.length > 0);
    }
    return new KeyGate(agent, limits, running, shut, false);
  }

  /**
   * When the first closed key throttle that holds back a queued task due by `now` reopens (null:
   * none). For an admission that found no candidate: its claim waits until then, not a poll.
   */
  async reopensAt(store: Pick<StoreAdapter, 'kind'>, tx: Tx, now: number): Promise<number | null> {
    const t = this.limits.throttle;
    if (!t || !this.throttleShut) return null;
    // Per closed key, its first queued task in executions_key_queued's order (run_after, a null
    // first): one index entry says whether the key has a task due, however deep its backlog. An
    // OFFSET keeps it a subplan PostgreSQL runs per key; inIndexOrder keeps it on that index.
    // SQLite's analysed statistics average an agent's keys and rate a seek of the agent's queue
    // with a sort below that one entry, so there the index is named (INDEXED BY).
    const firstOfKey = (eb: ExpressionBuilder<DB, 'flow_keys'>) =>
      store.kind === 'sqlite'
        ? sql<number>`(SELECT coalesce(e.run_after, 0) FROM executions AS e INDEXED BY executions_key_queued
            WHERE e.agent = flow_keys.agent AND e.flow_key = flow_keys.flow_key AND e.status = ${statusIs('queued')}
            ORDER BY e.run_after LIMIT 1)`
        : eb
            .selectFrom('executions')
            .select(sql<number>`coalesce(executions.run_after, 0)`.as('due'))
            .whereRef('executions.agent', '=', 'flow_keys.agent')
            .whereRef('executions.flow_key', '=', 'flow_keys.flow_key')
            .where('executions.status', '=', statusIs('queued'))
            .orderBy('executions.run_after', (ob) => ob.asc().nullsFirst())
            .limit(1)
            .offset(0);
    const { tat } = await inIndexOrder(store, tx, () =>
      tx
        .selectFrom('flow_keys')
        .select((eb) => eb.fn.min('throttle_tat').as('tat'))
        .where('flow_keys.agent', '=', this.agent)
        .where('throttle_tat', '>', now + t.burst * emissionMs(t))
        .where((eb) => eb(firstOfKey(eb), '<=', now))
        .executeTakeFirstOrThrow(),
    );
    return tat === null ? null : nextStartAt(t, Number(tat), now);
  }

  /** Read the throttle state of the candidates' keys (one statement; none without a key throttle). */
  async prepare(tx: Tx, keys: Iterable<string | null>): Promise<void> {
    if (!this.limits.throttle) return;
    const wanted = [...new Set([...keys].filter((k): k is string => k !== null))];
    if (wanted.length === 0) return;
    const rows = await tx
      .selectFrom('flow_keys')
      .select(['flow_key', 'throttle_tat'])
      .where('agent', '=', this.agent)
      .where('flow_key', 'in', wanted)
      .execute();
    for (const r of rows) this.tats.set(r.flow_key, r.throttle_tat === null ? null : Number(r.throttle_tat));
  }

  /** Whether a task of `key` may start now (its cap and throttle, counting this batch). */
  admits(key: string | null, now: number): boolean {
    if (key === null) return true;
    const cap = keyCap(this.limits, key);
    if (cap !== null && (this.running.get(key) ?? 0) >= cap) return false;
    const t = this.limits.throttle;
    return !t || throttleAdmits(t, this.tats.get(key) ?? null, now);
  }

  /** A task of `key` was admitted at `now`. */
  took(key: string | null, now: number): void {
    if (key === null) return;
    this.running.set(key, (this.running.get(key) ?? 0) + 1);
    const t = this.limits.throttle;
    if (t) {
      this.tats.set(key, afterStart(t, this.tats.get(key) ?? null, now));
      this.changed.add(key);
    }
  }

  /** Write the throttles the batch advanced (their rows exist: a keyed submit made them). */
  async save(tx: Tx): Promise<void> {
    for (const key of this.changed) {
      await tx
        .updateTable('flow_keys')
        .set({ throttle_tat: this.tats.get(key)! })
        .where('agent', '=', this.agent)
        .where('flow_key', '=', key)
        .execute();
    }
  }
}

/** Raise the agent's admit_round to the highest round admitted (on the row admission holds). */
export async function raiseAdmitRound(tx: Tx, agent: string, current: number, rows: readonly { fair_round: number }[]): Promise<void> {
  let top = 0;
  for (const r of rows) top = Math.max(top, Number(r.fair_round));
  if (top > Number(current)) await setAdmitRound(tx, { agent, top });
}
const setAdmitRound = preparedQuery((tx: Tx, p: { agent: string; top: number }) =>
  tx.updateTable('agents').set({ admit_round: p.top }).where('name', '=', p.agent),
);

/**
 * Whether a queued task waits on its key: key_busy (its cap is held; the holders, longest-running
 * first) or key_throttled (when the throttle next admits). Reads executions_key_running and one
 * flow_keys row; null: its key does not hold it.
 */
export async function keyWaiting(
  db: Executor,
  agent: KeyLimitColumns & { name: string },
  key: string | null,
  now: number,
): Promise<{ reason: 'key_busy' | 'key_throttled'; key: NonNullable<WaitingView['key']> } | null> {
  const limits = keyLimits(agent);
  if (key === null || !limits) return null;
  const cap = keyCap(limits, key);
  const found = await db
    .selectFrom('executions')
    .select(['id', 'lease_owner', 'lease_expires_at', 'started_at'])
    .where('agent', '=', agent.name)
    .where('flow_key', '=', key)
    .where('status', '=', statusIs('running'))
    .limit(AHEAD_COUNT_CAP)
    .execute();
  const t = limits.throttle;
  const state = t
    ? await db.selectFrom('flow_keys').select('throttle_tat').where('agent', '=', agent.name).where('flow_key', '=', key).executeTakeFirst()
    : undefined;
  const tat = state?.throttle_tat == null ? null : Number(state.throttle_tat);
  const view = (next: number | null): NonNullable<WaitingView['key']> => ({
    key,
    max_parallel: cap,
    running: found.length,
    holders: found
      .sort((x, y) => Number(x.started_at ?? 0) - Number(y.started_at ?? 0) || (x.id < y.id ? -1 : 1))
      .slice(0, SEAT_HOLDERS_SHOWN)
      .map((h) => ({
        execution_id: h.id,
        lease_owner: h.lease_owner,
        lease_expires_at: iso(h.lease_expires_at),
        started_at: iso(h.started_at),
        running_seconds: h.started_at === null ? null : Math.max(0, Math.round((now - Number(h.started_at)) / 1000)),
      })),
    throttle: t ? describeThrottle(t) : null,
    next_start_at: next === null ? null : iso(next),
  });
  if (cap !== null && found.length >= cap) return { reason: 'key_busy', key: view(null) };
  if (t && !throttleAdmits(t, tat, now)) return { reason: 'key_throttled', key: view(nextStartAt(t, tat, now)) };
  return null;
}
