import { describe, expect, it } from 'vitest';
import {
  AUDIT_RUNS_MAX,
  decideFiring,
  dueTimesOf,
  MISSED_ROWS_MAX,
  ON_TIME_MS,
  planDueTimes,
  type DueTimes,
  type FirePlan,
} from '../../src/engine/triggers/fire-plan.ts';
import type { AgentRow, ScheduleRow } from '../../src/store/schema.ts';

// The scheduler's decision over plain data: no store. The batch around it (locks, reads,
// writes) is covered by triggers.scheduler.test.ts and triggers.multiprocess.test.ts.

const T0 = Date.UTC(2026, 0, 5, 9, 0); // a due time on the minute
const S = 1000;
const MIN = 60 * S;
const ACTOR = 'scheduler:test';

function schedule(over: Partial<ScheduleRow> = {}): ScheduleRow {
  return {
    id: 's1',
    agent: 'a',
    name: 'n',
    cron: '* * * * *',
    timezone: 'UTC',
    message: 'tick',
    payload: '{"k":1}',
    enabled: 1,
    overlap_policy: 'allow',
    misfire_policy: 'run_once',
    misfire_grace_seconds: 300,
    retry_policy: null,
    priority: 0,
    next_run_at: T0,
    last_run_at: null,
    created_at: 0,
    updated_at: 0,
    ...over,
  };
}

function agent(name: string, maxBacklog: number): AgentRow {
  return {
    name,
    max_parallel: 1,
    max_backlog: maxBacklog,
    timeout_seconds: 600,
    lease_ttl_seconds: 30,
    max_redeliveries: 3,
    delivery: 'pull',
    push_url: null,
    push_secret: null,
    description: null,
    created_at: 0,
    updated_at: 0,
    retry_policy: '{"max_attempts":2}',
    paused_at: null,
    paused_by: null,
    breaker_config: null,
    breaker_state: 'closed',
    breaker_consecutive: 0,
    breaker_recent: '',
    breaker_opened_at: null,
    breaker_until: null,
    breaker_probe_id: null,
    breaker_cooldown_ms: null,
    paused_reason: null,
    last_claim_at: null,
    lapse_hold_at: null,
    lapse_hold_count: null,
    budget: null,
    fast_claim: 1,
    fast_complete: 1,
    running_count: 0,
    queued_out: 0,
    admit_round: 0,
    key_max_parallel: null,
    key_overrides: null,
    key_throttle: null,
    pools: null,
    throttle: null,
    throttle_tat: null,
  };
}

const off = (ms: number | null) => (ms === null ? null : `+${(ms - T0) / S}s`);

describe('planDueTimes: which due times run, which were missed, and the next one', () => {
  const cases: Array<
    [string, Partial<ScheduleRow>, number, { toStart: string[]; missed: string[]; earlier: number; next: string | null }]
  > = [
    ['on time: the due time runs, next is the following minute', {}, T0 + 400, { toStart: ['+0s'], missed: [], earlier: 0, next: '+60s' }],
    ['exactly ON_TIME_MS late still counts as on time', {}, T0 + ON_TIME_MS, { toStart: ['+0s'], missed: [], earlier: 0, next: '+60s' }],
    [
      'seconds cron: every due time within ON_TIME_MS runs',
      { cron: '*/10 * * * * *' },
      T0 + 25 * S,
      { toStart: ['+0s', '+10s', '+20s'], missed: [], earlier: 0, next: '+30s' },
    ],
    [
      'late, misfire skip: missed, nothing runs',
      { misfire_policy: 'skip' },
      T0 + ON_TIME_MS + 1,
      { toStart: [], missed: ['+0s'], earlier: 0, next: '+60s' },
    ],
    [
      'late, run_once within the grace: the latest missed due time is the one catch-up run',
      {},
      T0 + 3 * MIN + 40 * S,
      { toStart: ['+180s'], missed: ['+0s', '+60s', '+120s'], earlier: 0, next: '+240s' },
    ],
    [
      'late, run_once beyond the grace: every due time missed',
      { misfire_grace_seconds: 40 },
      T0 + 3 * MIN + 50 * S,
      { toStart: [], missed: ['+0s', '+60s', '+120s', '+180s'], earlier: 0, next: '+240s' },
    ],
    [
      'run_once with a due time on time: no catch-up, the late ones missed',
      {},
      T0 + 2 * MIN + 10 * S,
      { toStart: ['+120s'], missed: ['+0s', '+60s'], earlier: 0, next: '+180s' },
    ],
    [
      `over MISSED_ROWS_MAX (${MISSED_ROWS_MAX}) missed: the latest listed, the rest counted`,
      { misfire_policy: 'skip' },
      T0 + 29 * MIN + 40 * S,
      { toStart: [], missed: Array.from({ length: 20 }, (_, i) => `+${(10 + i) * 60}s`), earlier: 10, next: '+1800s' },
    ],
    [
      'a cron that no longer compiles: what is due runs once, then it stops',
      { cron: 'not a cron' },
      T0 + 400,
      { toStart: ['+0s'], missed: [], earlier: 0, next: null },
    ],
  ];
  it.each(cases)('%s', (_name, over, now, want) => {
    const got: DueTimes = planDueTimes(schedule(over), now);
    expect({ toStart: got.toStart.map(off), missed: got.missed.map(off), earlier: got.earlier, next: off(got.next) }).toEqual(want);
  });

  it('a schedule whose agent is gone starts nothing, yet still has its next due time (so it advances)', () => {
    const [d] = dueTimesOf([schedule()], new Map(), T0 + 400);
    expect(d!.times).toEqual({ toStart: [], missed: [], earlier: 0, next: T0 + MIN });
  });
});

interface Case {
  name: string;
  due: Array<Partial<ScheduleRow>>;
  now?: number;
  /** Default: agent 'a' with max_backlog 3. */
  agents?: AgentRow[];
  queued?: Record<string, number>;
  inFlight?: Record<string, string>;
  /** Schedules another process advanced first (the compare-and-set missed). */
  notAdvanced?: string[];
  /** One line per due time handled: `<schedule> <offset> <status> [reason]`. */
  fired: string[];
  /**
   * The batch's one audit entry (null: none), as its counts: `queued=<n> [<skip reason>=<n>…]
   * [missed_earlier=<n>] [agent_paused=<n>]`. Its runs list is checked against the rows for every case.
   */
  audit: string | null;
  /** error_message of each row, in order (undefined: not checked). */
  messages?: Array<string | RegExp | null>;
}

const missedWhy = (late: number, policy: string) =>
  `due at 2026-01-05T09:00:00.000Z, handled ${late} s late: more than 30 s late (a process was down?) and ${policy}`;

const cases: Case[] = [
  {
    name: 'room in the backlog: queued, counted in the batch audit entry',
    due: [{}],
    fired: ['s1 +0s queued'],
    audit: 'queued=1',
    messages: [null],
  },
  {
    name: 'agent paused: still queued (it waits for resume), and the report says the agent is paused',
    due: [{}],
    agents: [{ ...agent('a', 3), paused_at: T0 - 60 * S, paused_by: 'key:ops', paused_reason: 'maintenance' }],
    fired: ['s1 +0s queued agent_paused'],
    audit: 'queued=1 agent_paused=1',
    messages: [null],
  },
  {
    name: 'backlog full: skipped backlog_full',
    due: [{}],
    queued: { a: 3 },
    fired: ['s1 +0s skipped backlog_full'],
    audit: 'queued=0 backlog_full=1',
    messages: ["agent 'a' already has 3 queued executions (max_backlog)"],
  },
  {
    name: 'overlap skip, a run in flight: skipped already_running, naming that run',
    due: [{ overlap_policy: 'skip' }],
    inFlight: { s1: 'ex_busy' },
    fired: ['s1 +0s skipped already_running'],
    audit: 'queued=0 already_running=1',
    messages: ['a run of this schedule is in flight (execution ex_busy); overlap policy skip'],
  },
  {
    name: 'overlap skip, two due times in one pass: the first runs, the second defers to it',
    due: [{ overlap_policy: 'skip', cron: '*/10 * * * * *' }],
    now: T0 + 15 * S,
    fired: ['s1 +0s queued', 's1 +10s skipped already_running'],
    audit: 'queued=1 already_running=1',
    messages: [null, /^a run of this schedule is in flight \(execution ex_[\w-]+\); overlap policy skip$/],
  },
  {
    name: 'overlap skip, nothing in flight: queued',
    due: [{ overlap_policy: 'skip' }],
    inFlight: { other: 'ex_busy' },
    fired: ['s1 +0s queued'],
    audit: 'queued=1',
  },
  {
    name: 'overlap queue: every due time queued, one serial key',
    due: [{ overlap_policy: 'queue', cron: '*/10 * * * * *' }],
    now: T0 + 15 * S,
    fired: ['s1 +0s queued', 's1 +10s queued'],
    audit: 'queued=2',
  },
  {
    name: 'overlap allow: a run in flight does not matter',
    due: [{ overlap_policy: 'allow' }],
    inFlight: { s1: 'ex_busy' },
    fired: ['s1 +0s queued'],
    audit: 'queued=1',
  },
  {
    name: 'misfire skip: one missed row, audited once with the count',
    due: [{ misfire_policy: 'skip' }],
    now: T0 + 31 * S,
    fired: ['s1 +0s skipped missed'],
    audit: 'queued=0 missed=1',
    messages: [missedWhy(31, 'misfire policy skip')],
  },
  {
    name: 'misfire run_once within the grace: the older due times missed, the latest runs',
    due: [{}],
    now: T0 + MIN + 40 * S,
    fired: ['s1 +0s skipped missed', 's1 +60s queued'],
    audit: 'queued=1 missed=1',
    messages: [missedWhy(100, 'not the one catch-up run (misfire grace 300 s)'), null],
  },
  {
    name: 'more missed than MISSED_ROWS_MAX: the first row listed says how many came earlier',
    due: [{ misfire_policy: 'skip' }],
    now: T0 + 29 * MIN + 40 * S,
    fired: Array.from({ length: 20 }, (_, i) => `s1 +${(10 + i) * 60}s skipped missed`),
    audit: 'queued=0 missed=20 missed_earlier=10',
    messages: [
      /^due at 2026-01-05T09:10:00\.000Z, handled 1180 s late: .* misfire policy skip \(and 10 earlier due times since 2026-01-05T09:00:00\.000Z\)$/,
      ...Array<RegExp>(19).fill(/misfire policy skip$/),
    ],
  },
  {
    name: 'a full backlog leaves missed rows missed (they take no room)',
    due: [{ misfire_policy: 'skip' }],
    now: T0 + 31 * S,
    queued: { a: 3 },
    fired: ['s1 +0s skipped missed'],
    audit: 'queued=0 missed=1',
  },
  { name: 'agent gone: nothing written', due: [{ misfire_policy: 'skip' }, { id: 's2' }], agents: [], fired: [], audit: null },
  {
    name: 'next_run_at advanced elsewhere: nothing written, no backlog room taken',
    due: [{ id: 's1' }, { id: 's2' }],
    queued: { a: 2 },
    notAdvanced: ['s1'],
    fired: ['s2 +0s queued'],
    audit: 'queued=1',
  },
  {
    name: "one agent's schedules share its backlog room, in batch order",
    due: [{ id: 's1' }, { id: 's2' }, { id: 's3' }],
    queued: { a: 1 },
    fired: ['s1 +0s queued', 's2 +0s queued', 's3 +0s skipped backlog_full'],
    audit: 'queued=2 backlog_full=1',
  },
  {
    name: 'each agent has its own room',
    due: [
      { id: 's1', agent: 'a' },
      { id: 's2', agent: 'b' },
    ],
    agents: [agent('a', 3), agent('b', 1)],
    queued: { a: 3 },
    fired: ['s1 +0s skipped backlog_full', 's2 +0s queued'],
    audit: 'queued=1 backlog_full=1',
  },
  {
    name: 'overlap skip and a full backlog: backlog_full, and no run counts as in flight after it',
    due: [{ overlap_policy: 'skip', cron: '*/10 * * * * *' }],
    now: T0 + 15 * S,
    queued: { a: 3 },
    fired: ['s1 +0s skipped backlog_full', 's1 +10s skipped backlog_full'],
    audit: 'queued=0 backlog_full=2',
  },
];

function decide(c: Case): { plan: FirePlan; now: number } {
  const now = c.now ?? T0 + 400;
  const agents = new Map((c.agents ?? [agent('a', 3)]).map((a) => [a.name, a]));
  const due = dueTimesOf(c.due.map(schedule), agents, now);
  const advanced = new Set(due.map((d) => d.s.id).filter((id) => !c.notAdvanced?.includes(id)));
  const inFlight = new Map(Object.entries(c.inFlight ?? {}));
  const plan = decideFiring({ now, actor: ACTOR, due, agents, queued: new Map(Object.entries(c.queued ?? {})), inFlight, advanced });
  return { plan, now };
}

describe('decideFiring: one execution per due time, and why', () => {
  it.each(cases.map((c) => [c.name, c] as const))('%s', (_name, c) => {
    const inFlightBefore = JSON.stringify(c.inFlight ?? {});
    const { plan, now } = decide(c);
    expect(
      plan.fired.map((f) =>
        [f.schedule_id, off(f.scheduled_for), f.status, f.reason, f.agent_paused && 'agent_paused'].filter(Boolean).join(' '),
      ),
    ).toEqual(c.fired);
    expect(auditLine(plan)).toEqual(c.audit);
    if (c.messages)
      expect(plan.rows.map((r) => r.error_message ?? null)).toEqual(
        c.messages.map((m) => (m instanceof RegExp ? expect.stringMatching(m) : m)),
      );

    // Rows, report and audit agree with one another, whatever the case.
    expect(plan.rows.map((r) => r.id)).toEqual(plan.fired.map((f) => f.execution_id));
    plan.rows.forEach((r, i) => {
      const f = plan.fired[i]!;
      const s = schedule(c.due.find((d) => (d.id ?? 's1') === f.schedule_id));
      expect(r).toMatchObject({
        schedule_id: f.schedule_id,
        agent: f.agent,
        scheduled_for: f.scheduled_for,
        status: f.status,
        created_at: now,
        changed_by: ACTOR,
      });
      expect(r.error_code ?? null).toBe(f.reason ?? null);
      expect(r.serial_key).toBe(s.overlap_policy === 'queue' ? s.id : null);
    });
    // One audit entry for the batch, by the scheduler (nobody acted), naming every run it made.
    if (plan.audit) {
      expect(plan.audit).toMatchObject({ at: now, actor: ACTOR, action: 'schedule.batch', subject: null, execution_id: null });
      expect(plan.audit.detail!.runs).toEqual(
        plan.fired.map((f) => ({
          schedule_id: f.schedule_id,
          execution_id: f.execution_id,
          scheduled_for: f.scheduled_for,
          status: f.status,
          ...(f.reason ? { reason: f.reason } : {}),
          ...(f.agent_paused ? { agent_paused: true } : {}),
        })),
      );
      expect(plan.audit.detail!.runs_omitted).toBeUndefined();
    } else expect(plan.rows).toEqual([]);
    // A run queued earlier in the pass is what a later due time defers to (its message names it).
    for (const r of plan.rows.filter((r) => r.error_code === 'already_running')) {
      const running = /\(execution (\S+)\)/.exec(r.error_message!)![1]!;
      if (!Object.values(c.inFlight ?? {}).includes(running))
        expect(plan.fired.find((f) => f.execution_id === running)?.status).toBe('queued');
    }
    expect(JSON.stringify(c.inFlight ?? {})).toBe(inFlightBefore); // the facts are not written to
  });

  it('a queued row carries the schedule (message, payload, origin, priority) and the agent (timeouts, retry policy)', () => {
    const { plan } = decide({ name: '', due: [{ priority: 5 }], fired: [], audit: null });
    expect(plan.rows[0]).toMatchObject({
      trigger_kind: 'schedule',
      status: 'queued',
      attempt: 0,
      queued_at: T0 + 400,
      message: 'tick',
      payload: '{"k":1}',
      priority: 5,
      webhook_id: null,
      idempotency_key: null,
      timeout_seconds: 600,
      lease_ttl_seconds: 30,
      max_redeliveries: 3,
      retry_policy: '{"max_attempts":2}',
      change_reason: 'created',
    });
    expect(JSON.parse(plan.rows[0]!.origin)).toEqual({ schedule_id: 's1', scheduled_for: '2026-01-05T09:00:00.000Z' });
    expect(plan.audit).toEqual({
      at: T0 + 400,
      actor: ACTOR,
      action: 'schedule.batch',
      subject: null,
      execution_id: null,
      detail: {
        queued: 1,
        skipped: {},
        runs: [{ schedule_id: 's1', execution_id: plan.rows[0]!.id, scheduled_for: T0, status: 'queued' }],
      },
    });
  });

  it('a batch larger than AUDIT_RUNS_MAX lists the first runs and counts the rest', () => {
    const due = Array.from({ length: AUDIT_RUNS_MAX + 5 }, (_, i) => ({ id: `s${i}` }));
    const { plan } = decide({ name: '', due, agents: [agent('a', 1000)], fired: [], audit: null });
    expect(plan.rows).toHaveLength(AUDIT_RUNS_MAX + 5);
    expect(auditLine(plan)).toBe(`queued=${AUDIT_RUNS_MAX + 5}`);
    const runs = plan.audit!.detail!.runs as Array<{ execution_id: string }>;
    expect(runs.map((r) => r.execution_id)).toEqual(plan.rows.slice(0, AUDIT_RUNS_MAX).map((r) => r.id));
    expect(plan.audit!.detail!.runs_omitted).toBe(5);
  });
});

/** The counts of a batch's audit entry, as one line (null: no entry). */
function auditLine(plan: FirePlan): string | null {
  if (!plan.audit) return null;
  const d = plan.audit.detail as { queued: number; skipped: Record<string, number>; missed_earlier?: number; agent_paused?: number };
  const parts = [`queued=${d.queued}`];
  for (const reason of ['already_running', 'backlog_full', 'missed']) if (d.skipped[reason]) parts.push(`${reason}=${d.skipped[reason]}`);
  if (d.missed_earlier) parts.push(`missed_earlier=${d.missed_earlier}`);
  if (d.agent_paused) parts.push(`agent_paused=${d.agent_paused}`);
  return parts.join(' ');
}
