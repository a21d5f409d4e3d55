import { SUBSCRIPTION_ON } from '../../domain/chains.ts';
import { TERMINAL_STATES } from '../../domain/states.ts';
import type { Tx } from '../../store/adapter.ts';
import { forScope, statuses } from '../sql.ts';
import { touchedRows } from '../touched.ts';
import type { ActivityInvariant, CheckContext, Finding, RowScope } from '../types.ts';

const zero = () => 0;

/** A chained task (caused_by set) with its source and its chain_links row, as they are now. */
interface Chained {
  id: string;
  agent: string;
  caused_by: string;
  subscription_id: string | null;
  created_at: number;
  origin: string;
  /** Null: the source execution is gone. */
  source_id: string | null;
  source_status: string | null;
  source_schedule_id: string | null;
  source_trigger: string | null;
  source_origin: string | null;
  /** Null: no chain_links row for (caused_by, subscription_id). */
  link_source: string | null;
  link_execution_id: string | null;
}

/**
 * The chained tasks in scope (primary-key seeks, or a keyset range in a full check), each with
 * its source (primary key) and its link (chain_links primary key). Retries of a chained task do
 * not copy caused_by, so only the task a subscription created is read. Which executions in scope
 * are chained comes from the rows every row invariant shares (src/canary/touched.ts), read with no
 * condition on caused_by: given one, PostgreSQL may AND the id seeks with a walk of the whole
 * executions_caused_by partial index.
 */
async function chained(tx: Tx, part: RowScope, ctx: CheckContext): Promise<Chained[]> {
  const ids = (await touchedRows(tx, part, ctx)).filter((r) => r.caused_by !== null).map((r) => r.id);
  if (ids.length === 0) return [];
  const rows = await tx
    .selectFrom('executions as e')
    .leftJoin('executions as s', 's.id', 'e.caused_by')
    .leftJoin('chain_links as l', (j) => j.onRef('l.source_id', '=', 'e.caused_by').onRef('l.subscription_id', '=', 'e.subscription_id'))
    .select([
      'e.id',
      'e.agent',
      'e.caused_by',
      'e.subscription_id',
      'e.created_at',
      'e.origin',
      's.id as source_id',
      's.status as source_status',
      's.schedule_id as source_schedule_id',
      's.trigger_kind as source_trigger',
      's.origin as source_origin',
      'l.source_id as link_source',
      'l.execution_id as link_execution_id',
    ])
    .where('e.id', 'in', ids)
    .execute();
  return rows.map((r) => ({ ...r, caused_by: r.caused_by!, created_at: Number(r.created_at) }));
}

/**
 * Whether the source is gone because the pruner took it. The pruner removes a source's
 * chain_links rows with it (retention/prune.ts), so a link left behind means the source vanished
 * some other way; with neither, it was pruned and nothing about it can be judged.
 */
const pruned = (c: Chained) => c.source_id === null && c.link_source === null;

/**
 * C-02: a chained task is created in the transaction that ended its source (followFinals), so
 * its source has a terminal event no later than the task's creation, and the chain_links row of
 * (source, subscription) names it. Over the executions touched since the checkpoint (a chained
 * task is touched by its creation event); the full check walks every execution.
 */
export const C02: ActivityInvariant = {
  kind: 'activity',
  id: 'C-02',
  tier: 'A',
  severity: 'critical',
  holds:
    'every chained task has a source that reached a terminal state at or before its creation, and the chain_links row of its source and subscription names it',
  diagnoses: {
    source_not_final:
      'a chained task exists whose source had not ended when it was created: a task was chained outside the completing transaction (engine/composition/chains.ts startChained)',
    source_missing:
      'the source of a chained task is gone but its chain_links row is not: something other than the pruner deleted the source (retention/prune.ts removes both)',
    link_missing:
      'a chained task has no chain_links row for its source and subscription: it was created outside the exactly-once link (engine/composition/chains.ts)',
    link_elsewhere:
      'the chain_links row of a chained task names another execution or a refusal: the same link started two tasks, or the task was not the one the link recorded (engine/composition/chains.ts)',
  },
  grace: zero,
  fullWalksRows: true,
  rows: (tx, scope, ctx) =>
    forScope(scope, async (part) => {
      const rows = await chained(tx, part, ctx);
      if (rows.length === 0) return [];
      // The sources' terminal events at or before each task's creation: a seek per source on
      // execution_events (execution_id, id).
      const events = await tx
        .selectFrom('execution_events')
        .select(['execution_id', 'at'])
        .where('execution_id', 'in', [...new Set(rows.map((r) => r.caused_by))])
        .where('to_status', 'in', statuses(TERMINAL_STATES))
        .execute();
      const endedAt = new Map<string, number>();
      for (const e of events) {
        const at = Number(e.at);
        endedAt.set(e.execution_id, Math.min(at, endedAt.get(e.execution_id) ?? at));
      }
      const out: Finding[] = [];
      for (const r of rows) {
        const f = (reason: string, detail?: Finding['detail']) => out.push({ subject: r.id, agent: r.agent, reason, detail });
        if (pruned(r)) continue;
        if (r.source_id === null) f('source_missing', { caused_by: r.caused_by });
        else if (!((endedAt.get(r.caused_by) ?? Infinity) <= r.created_at))
          f('source_not_final', { caused_by: r.caused_by, source_status: r.source_status });
        else if (r.link_source === null) f('link_missing', { caused_by: r.caused_by, subscription_id: r.subscription_id });
        else if (r.link_execution_id !== r.id)
          f('link_elsewhere', { caused_by: r.caused_by, subscription_id: r.subscription_id, link_execution_id: r.link_execution_id });
      }
      return out;
    }),
};

/** What a chained task's origin records about the subscription that created it (engine/composition/chains.ts). */
interface ChainOrigin {
  source_id?: unknown;
  subscription_id?: unknown;
  on?: unknown;
  filter?: { schedule_id?: unknown; trigger?: unknown } | null;
}

function chainOrigin(origin: string): ChainOrigin | undefined {
  try {
    const o = JSON.parse(origin) as { chain?: unknown };
    return o && typeof o.chain === 'object' && o.chain !== null ? (o.chain as ChainOrigin) : undefined;
  } catch {
    return undefined;
  }
}

/** `any` is every final outcome but skipped (a start that started nothing causes nothing). */
const CHAINING: ReadonlySet<string> = new Set(SUBSCRIPTION_ON.filter((on) => on !== 'any'));

export function matchesOn(on: unknown, status: string | null): boolean {
  if (status === null || !CHAINING.has(status)) return false;
  return on === 'any' || on === status;
}

/**
 * The trigger kind a subscription's filter compares: a retry stands in for the run it repeats, so
 * its first run's kind (kept in the retry's origin, transitions/retry.ts).
 */
export function firstTriggerOf(kind: string | null, origin: string | null): string | null {
  if (kind !== 'retry') return kind;
  try {
    const first = (JSON.parse(origin ?? '{}') as { first_trigger?: unknown }).first_trigger;
    return typeof first === 'string' ? first : kind;
  } catch {
    return kind;
  }
}

function isManualRetry(origin: string): boolean {
  try {
    return typeof (JSON.parse(origin) as { by?: unknown }).by === 'string';
  } catch {
    return false;
  }
}

/**
 * C-03: a subscription starts a task only for an outcome it matches — the source's final status
 * matches the `on` recorded in the task's origin, the recorded filter matches the source's
 * schedule and trigger kind, the source was not retried by its policy (a failure followed by a retry
 * is not final) — and at most once per (source, subscription). Over the executions touched since the
 * checkpoint; the full check walks every execution.
 */
export const C03: ActivityInvariant = {
  kind: 'activity',
  id: 'C-03',
  tier: 'A',
  severity: 'critical',
  holds:
    'a chained task was created only for a source outcome its subscription matched (status `on`, schedule and trigger filter, final after retries), at most once per source and subscription',
  diagnoses: {
    origin_missing:
      'a chained task carries no chain origin (source, subscription, on, filter): its creation did not record what it matched (engine/composition/chains.ts)',
    origin_mismatch:
      "a chained task's origin names another source or subscription than its caused_by / subscription_id columns (engine/composition/chains.ts)",
    status_mismatch:
      "a chained task was created for a source status its subscription's `on` does not match: the match in engine/composition/chains.ts is wrong",
    source_retried:
      'a chained task was created for a source that was retried: only final outcomes chain (a failure with a retry is not final; followFinals callers)',
    filter_mismatch:
      "a chained task was created for a source outside its subscription's filter (schedule or trigger kind): the filter in engine/composition/chains.ts is wrong",
    duplicate_chain:
      'a source and subscription started more than one task: the chain was not exactly once (chain_links primary key, engine/composition/chains.ts)',
  },
  grace: zero,
  fullWalksRows: true,
  rows: (tx, scope, ctx) =>
    forScope(scope, async (part) => {
      const rows = await chained(tx, part, ctx);
      if (rows.length === 0) return [];
      const sources = [...new Set(rows.map((r) => r.caused_by))];
      // Sources their retry policy retried: a seek per source on executions_retry_of. A policy's
      // retry is created with the failure, so no later than a task chained from it; a retry a
      // person asked for later (manual-retry.ts: its origin says `by`) does not make the failure
      // any less final at the time it chained.
      const retriedAt = new Map<string, number>();
      for (const r of await tx
        .selectFrom('executions')
        .select(['retry_of', 'created_at', 'origin'])
        .where('retry_of', 'in', sources)
        .execute()) {
        if (isManualRetry(r.origin)) continue;
        const at = Number(r.created_at);
        retriedAt.set(r.retry_of!, Math.min(at, retriedAt.get(r.retry_of!) ?? at));
      }
      // Tasks per (source, subscription): a seek per source on executions_caused_by. Every task of
      // a pair that has more than one is reported, whichever of them was touched.
      const pair = (source: string, sub: string | null) => `${source}\u0000${sub ?? ''}`;
      const tasks = new Map<string, { caused_by: string; subscription_id: string | null; list: Array<{ id: string; agent: string }> }>();
      const siblings = await tx
        .selectFrom('executions')
        .select(['id', 'agent', 'caused_by', 'subscription_id'])
        .where('caused_by', 'in', sources)
        .execute();
      for (const s of siblings) {
        const key = pair(s.caused_by!, s.subscription_id);
        const t = tasks.get(key) ?? { caused_by: s.caused_by!, subscription_id: s.subscription_id, list: [] };
        t.list.push({ id: s.id, agent: s.agent });
        tasks.set(key, t);
      }
      const out: Finding[] = [];
      const duplicated = new Set<string>();
      for (const [key, { caused_by, subscription_id, list }] of tasks) {
        if (list.length < 2) continue;
        duplicated.add(key);
        for (const t of list)
          out.push({
            subject: t.id,
            agent: t.agent,
            reason: 'duplicate_chain',
            detail: { caused_by, subscription_id, tasks: list.length },
          });
      }
      for (const r of rows) {
        const f = (reason: string, detail?: Finding['detail']) => out.push({ subject: r.id, agent: r.agent, reason, detail });
        if (duplicated.has(pair(r.caused_by, r.subscription_id))) continue;
        const o = chainOrigin(r.origin);
        if (!o) {
          f('origin_missing');
          continue;
        }
        if (o.source_id !== r.caused_by || o.subscription_id !== r.subscription_id) {
          f('origin_mismatch', { caused_by: r.caused_by, subscription_id: r.subscription_id });
          continue;
        }
        if (pruned(r) || r.source_id === null) continue; // nothing left to compare with (C-02 judges a missing source)
        const on = typeof o.on === 'string' ? o.on : null;
        if (!matchesOn(on, r.source_status)) f('status_mismatch', { on, source_status: r.source_status });
        else if ((retriedAt.get(r.caused_by) ?? Infinity) <= r.created_at)
          f('source_retried', { caused_by: r.caused_by, source_status: r.source_status });
        else {
          const wantSchedule = o.filter?.schedule_id ?? null;
          const wantTrigger = o.filter?.trigger ?? null;
          if (wantSchedule !== null && wantSchedule !== r.source_schedule_id)
            f('filter_mismatch', { filter: 'schedule_id', source_schedule_id: r.source_schedule_id });
          else if (wantTrigger !== null && wantTrigger !== firstTriggerOf(r.source_trigger, r.source_origin))
            f('filter_mismatch', { filter: 'trigger', source_trigger: firstTriggerOf(r.source_trigger, r.source_origin) });
        }
      }
      return out;
    }),
};
