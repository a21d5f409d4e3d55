import { sql } from 'kysely';
import { waitingSince } from '../../engine/backlog.ts';
import { inIndexOrder } from '../../engine/candidates.ts';
import { BREAKER_COLUMNS } from '../../engine/breaker.ts';
import { admissionNow } from '../../engine/holds.ts';
import { FLOW_COLUMNS, flowGate } from '../../engine/pools.ts';
import { graces } from '../graces.ts';
import { status } from '../sql.ts';
import { queuedOfAgent } from './seats.ts';
import { MAX_FINDINGS, type Finding, type StateInvariant } from '../types.ts';

const n = (v: unknown) => (v === null || v === undefined ? null : Number(v));

interface PushAgent {
  agent: string;
  max_parallel: number;
  running: number;
  /** When the longest-waiting admissible queued row became admissible (older than the SLA), or null. */
  oldest_admissible: number | null;
}

/**
 * B-02. Only push agents: Baton's own dispatcher serves them, so admissible work waiting while
 * seats are free is Baton's fault. A pull agent's queue waits for workers Baton cannot see (none
 * connected, or fewer than the seats) — an operations matter the metrics show, not a bug here.
 * A queued row became admissible at max(changed_at, run_after): changed_at is when it last
 * entered `queued` (created, re-queued or released). An agent whose admission is held (paused,
 * breaker open, budget spent, lapse hold: decided as admission decides it) admits nothing by
 * design: its queue waiting is no finding.
 */
export const B02: StateInvariant<PushAgent> = {
  kind: 'state',
  id: 'B-02',
  tier: 'B',
  severity: 'warning',
  holds: 'no push agent has admissible queued work while seats are free for longer than the dispatch SLA',
  diagnoses: {
    queued_with_free_seats:
      'a push agent has admissible work queued beyond the dispatch SLA while seats are free: the dispatcher is stuck or not running',
  },
  grace: graces.dispatchSla,
  async population(tx, { now, graceMs }) {
    const cutoff = now - graceMs;
    const agents = await tx
      .selectFrom('agents')
      .select(['name', 'max_parallel', 'budget', 'paused_at', 'paused_by', 'paused_reason', 'lapse_hold_at', 'lapse_hold_count'])
      .select(FLOW_COLUMNS)
      .select(BREAKER_COLUMNS)
      .where('delivery', '=', 'push')
      .where('max_parallel', '>', 0)
      .execute();
    if (agents.length === 0) return [];
    const names = agents.map((a) => a.name);
    const running = await tx
      .selectFrom('executions')
      .select(['agent', (eb) => eb.fn.countAll<number>().as('n')])
      .where('status', '=', status('running'))
      .where('agent', 'in', names)
      .groupBy('agent')
      .execute();
    const waiting = await tx
      .selectFrom('executions')
      .select(['agent', (eb) => eb.fn.min<number>('changed_at').as('oldest')])
      .where('status', '=', status('queued'))
      .where('agent', 'in', names)
      .where('changed_at', '<', cutoff)
      .where((eb) => eb.or([eb('run_after', 'is', null), eb('run_after', '<', cutoff)]))
      .groupBy('agent')
      .execute();
    const r = new Map(running.map((x) => [x.agent, Number(x.n)]));
    const w = new Map(waiting.map((x) => [x.agent, n(x.oldest)]));
    const out: PushAgent[] = [];
    for (const a of agents) {
      let oldest = w.get(a.name) ?? null;
      // Only an agent that would be a finding is asked about its holds (seeks on its own rows).
      if (oldest !== null && (r.get(a.name) ?? 0) < a.max_parallel && (await admissionNow(tx, a, now)).hold !== null) oldest = null;
      // A throttle or a pool that admits nothing now stops the dispatcher as a hold does.
      if (oldest !== null && (await flowGate(tx, null, a, now, 1))?.room === 0) oldest = null;
      out.push({ agent: a.name, max_parallel: a.max_parallel, running: r.get(a.name) ?? 0, oldest_admissible: oldest });
    }
    return out;
  },
  evaluate(rows, { now, graceMs }) {
    return rows
      .filter((a) => a.running < a.max_parallel && a.oldest_admissible !== null && a.oldest_admissible < now - graceMs)
      .map((a) => ({
        subject: a.agent,
        agent: a.agent,
        reason: 'queued_with_free_seats',
        detail: { running: a.running, max_parallel: a.max_parallel, waiting_ms: now - a.oldest_admissible! },
      }));
  },
};

interface StaleQueued {
  id: string;
  agent: string;
  waiting_since: number;
}

/** B-05: the reaper's backlog-expiry sweep, measured the way the reaper measures it. */
export const B05: StateInvariant<StaleQueued> = {
  kind: 'state',
  id: 'B-05',
  tier: 'B',
  severity: 'warning',
  holds: 'no queued row waits longer than the backlog expiry (plus two reaper intervals)',
  diagnoses: {
    queued_past_expiry: 'a queued execution outlived the backlog expiry: the reaper backlog sweep is not running (transitions/expire.ts)',
  },
  grace: graces.backlogExpiry,
  async population(tx, { now, graceMs, kind }) {
    const cutoff = now - graceMs;
    // Oldest first, in the order of executions_status_recent: its range of queued rows created
    // before the cutoff is walked until the limit, never sorted (a backlog may be deep). Read
    // under inIndexOrder: with statistics of before the queue grew, PostgreSQL estimated one queued
    // row and walked every queued row through executions_admission, then sorted them (at
    // 1,000,000 past executions and 2,600 queued: 2,793 buffers against 3).
    const rows = await inIndexOrder({ kind }, tx, () =>
      tx
        .selectFrom('executions')
        .select(['id', 'agent', (eb) => eb.fn.coalesce('started_at', 'queued_at').as('waiting_since')])
        .where((eb) => waitingSince(eb, cutoff))
        .orderBy('created_at')
        .orderBy('id')
        .limit(MAX_FINDINGS + 1)
        .execute(),
    );
    return rows.map((r) => ({ id: r.id, agent: r.agent, waiting_since: Number(r.waiting_since) }));
  },
  evaluate(rows, { now, graceMs }) {
    return rows
      .filter((r) => r.waiting_since < now - graceMs)
      .map((r) => ({ subject: r.id, agent: r.agent, reason: 'queued_past_expiry', detail: { waiting_ms: now - r.waiting_since } }));
  },
};

interface BacklogCount {
  agent: string;
  max_backlog: number;
  /** Null when the agent's queued rows are within max_backlog, so its fresh ones are too. */
  fresh_queued: number | null;
}

/**
 * B-06. Counts only rows that never started and were submitted after the agent's settings last
 * changed. The submit path refuses at max_backlog by counters of *every* queued row (S-05), so those rows
 * alone can never exceed it — whereas the full queued count legitimately can: the reaper
 * re-queues lapsed rows and a release hands rows back regardless of max_backlog, and lowering
 * max_backlog leaves the existing queue in place. The fresh rows are a part of the queued ones,
 * so they are counted (from the rows: a heap read each) only for an agent whose queued rows,
 * counted from executions_admission alone, exceed max_backlog.
 */
export const B06: StateInvariant<BacklogCount> = {
  kind: 'state',
  id: 'B-06',
  tier: 'A',
  severity: 'warning',
  holds: 'queued ≤ max_backlog (rows submitted since the agent settings changed and never started)',
  diagnoses: {
    backlog_exceeded:
      'more executions were accepted than max_backlog allows: the submit path did not count the backlog under the agent lock (Engine.submit, transitions/create.ts)',
  },
  grace: () => 0,
  async population(tx, ctx) {
    // Per agent (one row each, as S-05 reads), counts read on PostgreSQL in executions_admission's
    // order under inIndexOrder: a walk of that agent's queued rows only (SQLite seeks by agent
    // unasked). Left to choose, PostgreSQL with statistics of before the queue grew seeks
    // executions_status_recent by status and reads every agent's queued rows for each agent.
    const rows = await inIndexOrder({ kind: ctx.kind }, tx, () =>
      tx
        .selectFrom('agents as a')
        .select(['a.name as agent', 'a.max_backlog'])
        .select((eb) => {
          const fresh = eb
            .selectFrom(
              eb
                .selectFrom('executions as e')
                .select('e.id')
                .whereRef('e.agent', '=', 'a.name')
                .where('e.status', '=', status('queued'))
                .whereRef('e.created_at', '>', 'a.updated_at')
                .where('e.started_at', 'is', null)
                .$if(ctx.kind === 'postgres', (q) => q.orderBy('e.priority').orderBy('e.fair_round').orderBy('e.queued_at').orderBy('e.id'))
                .as('q'),
            )
            .select((q) => q.fn.countAll<number>().as('n'));
          return sql<number | null>`CASE WHEN (${queuedOfAgent(eb, ctx.kind)}) > a.max_backlog THEN (${fresh}) END`.as('fresh_queued');
        })
        .execute(),
    );
    return rows.map((r) => ({ agent: r.agent, max_backlog: Number(r.max_backlog), fresh_queued: n(r.fresh_queued) }));
  },
  evaluate(rows) {
    return rows
      .filter((r) => r.fresh_queued !== null && r.fresh_queued > r.max_backlog)
      .map((r): Finding => ({
        subject: r.agent,
        agent: r.agent,
        reason: 'backlog_exceeded',
        detail: { queued: r.fresh_queued, max_backlog: r.max_backlog },
      }));
  },
};
