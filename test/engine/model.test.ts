import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_FORGIVEN_LAPSES, SHARED_LAPSE_THRESHOLD } from '../../src/domain/admission.ts';
import type { BreakerConfig } from '../../src/domain/breaker.ts';
import type { Budget } from '../../src/domain/budget.ts';
import { BatonError } from '../../src/domain/errors.ts';
import { isTerminal, type CompletionStatus, type ExecutionStatus } from '../../src/domain/states.ts';
import { Engine } from '../../src/engine/engine.ts';
import { liveCountsByAgent } from '../../src/engine/live-counts.ts';
import type { ExecutionEventRow, ExecutionRow } from '../../src/store/schema.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

// Model-based test: random command sequences run against the engine and against a small
// in-memory model of the state machine, its holds (pause, circuit breaker, budget, shared-cause
// lapse) and what a final outcome starts (a subscription's task, group members). After every
// command the rows must equal the model and the invariants must hold on the rows and on the event log.

const LEASE_MS = 10_000;
const GRACE_MS = 15_000;
const BACKLOG_MS = 90_000;

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let run = 0;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'model', cancelGraceMs: GRACE_MS, backlogExpiryMs: BACKLOG_MS });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

// ── commands ────────────────────────────────────────────────────────────────

/** Which execution a command aims at: mostly a live one (queued or running), sometimes any. */
interface Target {
  i: number;
  live: boolean;
}

type Cmd =
  | { kind: 'create'; agent: number; priority: number }
  | { kind: 'claim'; agent: number; max: number }
  | { kind: 'heartbeat'; ex: Target; token: number }
  | { kind: 'complete'; ex: Target; token: number; status: CompletionStatus; cost: number }
  | { kind: 'release'; ex: Target; token: number }
  | { kind: 'cancel'; ex: Target }
  | { kind: 'advance'; ms: number }
  | { kind: 'reap' }
  | { kind: 'pause'; agent: number }
  | { kind: 'resume'; agent: number }
  | { kind: 'closeBreaker'; agent: number }
  | { kind: 'group'; agents: number[] };

interface AgentSpec {
  max_parallel: number;
  max_backlog: number;
  max_redeliveries: number;
  /** Some agents time out after the backlog expiry, so a re-queue and an expiry can share a reaper pass. */
  timeout_seconds: number;
  /** A circuit breaker (BREAKER): two counted failures in a row open it. */
  breaker: boolean;
  /** A budget (BUDGET): half a dollar per hour. */
  budget: boolean;
}

const BREAKER: BreakerConfig = {
  consecutive: 2,
  ratio: 1,
  window: 3,
  cooldown_ms: 5_000,
  max_cooldown_ms: 20_000,
  count: ['agent_error', 'timeout', 'poisoned'],
};
const BUDGET: Budget = { limits: [{ metric: 'cost_usd', window: 'hour', limit: 0.5 }] };
const HOUR = 3_600_000;

const agentArb: fc.Arbitrary<AgentSpec> = fc.record({
  max_parallel: fc.integer({ min: 1, max: 2 }),
  max_backlog: fc.integer({ min: 2, max: 4 }),
  max_redeliveries: fc.integer({ min: 0, max: 2 }),
  timeout_seconds: fc.constantFrom(45, 150),
  breaker: fc.boolean(),
  budget: fc.boolean(),
});

const ex: fc.Arbitrary<Target> = fc.record({ i: fc.nat({ max: 15 }), live: fc.boolean() });
const token = fc.nat({ max: 4 });
const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({ kind: fc.constant('create' as const), agent: fc.nat({ max: 2 }), priority: fc.integer({ min: 0, max: 1 }) }),
  },
  {
    weight: 5,
    arbitrary: fc.record({ kind: fc.constant('claim' as const), agent: fc.nat({ max: 2 }), max: fc.integer({ min: 1, max: 2 }) }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('heartbeat' as const), ex, token }) },
  {
    weight: 7,
    arbitrary: fc.record({
      kind: fc.constant('complete' as const),
      ex,
      token,
      status: fc.constantFrom<CompletionStatus>('succeeded', 'failed', 'cancelled'),
      cost: fc.constantFrom(0, 0.5, 1),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('release' as const), ex, token }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('cancel' as const), ex }) },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('advance' as const),
      ms: fc.constantFrom(1_000, 4_000, 9_000, 11_000, 16_000, 40_000, 95_000),
    }),
  },
  { weight: 3, arbitrary: fc.constant({ kind: 'reap' as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('pause' as const), agent: fc.nat({ max: 2 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('resume' as const), agent: fc.nat({ max: 2 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('closeBreaker' as const), agent: fc.nat({ max: 2 }) }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('group' as const), agents: fc.array(fc.nat({ max: 2 }), { minLength: 1, maxLength: 3 }) }),
  },
);

// ── the model ───────────────────────────────────────────────────────────────

interface Modelled {
  id: string;
  agent: number;
  priority: number;
  status: ExecutionStatus;
  attempt: number;
  queuedAt: number;
  startedAt: number | null;
  leaseExpiresAt: number | null;
  deadlineAt: number | null;
  cancelRequestedAt: number | null;
  /** The latest token granted: the only one that may write. */
  token: string | null;
  /** Every token a worker was ever handed for this row (stale ones included, to test fencing). */
  granted: string[];
  errorCode: string | null;
  /** Shared-cause lapses forgiven (the attempt given back), at most MAX_FORGIVEN_LAPSES. */
  lapsesForgiven: number;
}

/** A circuit breaker as BREAKER configures it (src/domain/breaker.ts, restated). */
interface Breaker {
  state: 'closed' | 'open' | 'half_open';
  consecutive: number;
  until: number | null;
  cooldown: number | null;
  probe: string | null;
}
const closedBreaker = (): Breaker => ({ state: 'closed', consecutive: 0, until: null, cooldown: null, probe: null });

interface AgentModel {
  paused: boolean;
  breaker: Breaker;
  /** Dollars spent, by the start of the hour (the budget's window). */
  spent: Map<number, number>;
}

const hourOf = (t: number) => Math.floor(t / HOUR) * HOUR;

class Model {
  readonly rows: Modelled[] = [];
  /** Agents under a shared-cause lapse hold: set by the reaper, ended by a claim or heartbeat. */
  readonly held = new Set<number>();
  readonly agents: AgentModel[];
  /** Subscriptions expected to start a task: on the target agent, when the source's run succeeded. */
  chained: number[] = [];
  constructor(
    readonly names: string[],
    readonly specs: AgentSpec[],
    /** A subscription from agent 0 to agent 1 on success. */
    readonly chain: boolean,
  ) {
    this.agents = specs.map(() => ({ paused: false, breaker: closedBreaker(), spent: new Map() }));
  }

  /** Whether `agent` may admit at `now`, and whether as the breaker's one probe. */
  admission(agent: number, now: number): { hold: boolean; probe: boolean } {
    const a = this.agents[agent]!;
    const spec = this.specs[agent]!;
    if (a.paused || (spec.budget && (a.spent.get(hourOf(now)) ?? 0) >= BUDGET.limits[0]!.limit)) return { hold: true, probe: false };
    const b = a.breaker;
    if (!spec.breaker || b.state === 'closed') return { hold: false, probe: false };
    if (b.state === 'open') return now < b.until! ? { hold: true, probe: false } : { hold: false, probe: true };
    const probeRunning = b.probe !== null && this.rows.find((r) => r.id === b.probe)?.status === 'running';
    return probeRunning ? { hold: true, probe: false } : { hold: false, probe: true };
  }

  /** A row reached a final status at `now`: its breaker outcome, and the task a subscription starts. */
  finished(r: Modelled, now: number): void {
    if (r.agent === 0 && this.chain && r.status === 'succeeded') this.chained.push(1);
    if (!this.specs[r.agent]!.breaker) return;
    const outcome = r.status === 'succeeded' ? 'success' : r.status === 'failed' && r.errorCode !== 'backlog_expired' ? 'failure' : null;
    const b = this.agents[r.agent]!.breaker;
    const open = (cooldown: number) => Object.assign(b, { state: 'open', consecutive: 0, until: now + cooldown, cooldown, probe: null });
    if (b.state === 'closed') {
      if (outcome === 'success') b.consecutive = 0;
      else if (outcome === 'failure' && ++b.consecutive >= BREAKER.consecutive) open(BREAKER.cooldown_ms);
    } else if (b.state === 'half_open' && b.probe === r.id) {
      if (outcome === 'success') Object.assign(b, closedBreaker());
      else if (outcome === 'failure') open(Math.min(2 * b.cooldown!, BREAKER.max_cooldown_ms));
      else b.probe = null;
    }
  }

  of(agent: number, status: ExecutionStatus): Modelled[] {
    return this.rows.filter((r) => r.agent === agent && r.status === status);
  }

  /** What one reaper pass must do, applied to the model, in the engine's order. */
  reap(now: number): Array<[string, string]> {
    const out: Array<[string, string]> = [];
    // Shared-cause lapses (src/engine/transitions/expire.ts): plain lapses, per agent.
    const lapses = new Map<number, number>();
    for (const r of this.rows) {
      const plain = r.status === 'running' && r.leaseExpiresAt! < now && !(r.deadlineAt! < now) && r.cancelRequestedAt === null;
      if (plain) lapses.set(r.agent, (lapses.get(r.agent) ?? 0) + 1);
    }
    const shared = (agent: number) => (lapses.get(agent) ?? 0) >= SHARED_LAPSE_THRESHOLD || this.held.has(agent);
    for (const r of this.rows) {
      if (r.status !== 'running') continue;
      const timedOut = r.deadlineAt! < now;
      const forced = r.cancelRequestedAt !== null && r.cancelRequestedAt < now - GRACE_MS;
      if (!timedOut && !forced && !(r.leaseExpiresAt! < now)) continue;
      const end = (status: ExecutionStatus, kind: string, code: string | null) => {
        r.status = status;
        r.errorCode = code;
        r.leaseExpiresAt = null;
        out.push([r.id, kind]);
        if (isTerminal(status)) this.finished(r, now);
      };
      if (timedOut) end('failed', 'timed_out', 'timeout');
      else if (forced) end('cancelled', 'cancel_forced', 'cancel_forced');
      else if (r.cancelRequestedAt !== null) end('cancelled', 'cancelled', 'cancel_requested');
      else if (shared(r.agent) && r.lapsesForgiven < MAX_FORGIVEN_LAPSES) {
        end('queued', 'requeued_shared', null);
        Object.assign(r, { deadlineAt: null, attempt: r.attempt - 1, lapsesForgiven: r.lapsesForgiven + 1 });
        this.held.add(r.agent);
      } else if (r.attempt > this.specs[r.agent]!.max_redeliveries) end('failed', 'poisoned', 'poisoned');
      else {
        end('queued', 'requeued', null);
        r.deadlineAt = null;
      }
    }
    for (const r of this.rows) {
      if (r.status === 'queued' && (r.startedAt ?? r.queuedAt) < now - BACKLOG_MS) {
        r.status = 'failed';
        r.errorCode = 'backlog_expired';
        out.push([r.id, 'backlog_expired']);
        this.finished(r, now);
      }
    }
    return out;
  }
}

const queuedRow = (id: string, agent: number, priority: number, now: number): Modelled => ({
  id,
  agent,
  priority,
  status: 'queued',
  attempt: 0,
  queuedAt: now,
  startedAt: null,
  leaseExpiresAt: null,
  deadlineAt: null,
  cancelRequestedAt: null,
  token: null,
  granted: [],
  errorCode: null,
  lapsesForgiven: 0,
});

/** The tasks subscriptions started (model.chained): one each where the target's backlog had room, none where it was full. */
async function adoptChained(model: Model, now: number): Promise<void> {
  for (const agent of model.chained.splice(0)) {
    const known = new Set(model.rows.map((r) => r.id));
    const found = await ts.store.db.selectFrom('executions').select('id').where('agent', '=', model.names[agent]!).execute();
    const started = found.filter((r) => !known.has(r.id));
    const room = model.of(agent, 'queued').length < model.specs[agent]!.max_backlog;
    expect(started.length, `a task chained onto ${model.names[agent]}`).toBe(room ? 1 : 0);
    if (room) model.rows.push(queuedRow(started[0]!.id, agent, 0, now));
  }
}

/** `leased`: a live target is a running one where there is one (completions, so that holds come about). */
function target(model: Model, t: Target, leased = false): Modelled | undefined {
  const live = model.rows.filter((r) => !isTerminal(r.status));
  const running = live.filter((r) => r.status === 'running');
  const pool = t.live && leased && running.length > 0 ? running : t.live && live.length > 0 ? live : model.rows;
  return pool[t.i % pool.length];
}

const tokenFor = (m: Modelled, i: number) => (m.granted.length === 0 ? 'ls_never_granted' : m.granted[i % m.granted.length]!);

async function outcome<T>(p: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; code: string }> {
  try {
    return { ok: true, value: await p };
  } catch (err) {
    if (err instanceof BatonError) return { ok: false, code: err.code };
    throw err;
  }
}

/** Run one command on both sides and check the engine's answer against the model's. */
async function step(model: Model, cmd: Cmd): Promise<void> {
  clock.advance(1); // distinct queued_at, so FIFO order is fully determined by the model
  const now = clock();
  switch (cmd.kind) {
    case 'create': {
      const agent = cmd.agent % model.specs.length;
      const spec = model.specs[agent]!;
      const got = await outcome(engine.submit(model.names[agent]!, { message: 'm', priority: cmd.priority }, 'model'));
      if (model.of(agent, 'queued').length >= spec.max_backlog) {
        expect(got).toEqual({ ok: false, code: 'backlog_full' });
        return;
      }
      if (!got.ok) throw new Error(`submit refused: ${got.code}`);
      model.rows.push(queuedRow(got.value.id, agent, cmd.priority, now));
      return;
    }
    case 'claim': {
      const agent = cmd.agent % model.specs.length;
      model.held.delete(agent); // a claim is a worker seen again: it ends the hold and admits
      const spec = model.specs[agent]!;
      const { hold, probe } = model.admission(agent, now);
      const free = hold ? 0 : spec.max_parallel - model.of(agent, 'running').length;
      const expected = model
        .of(agent, 'queued')
        .sort((a, b) => a.priority - b.priority || a.queuedAt - b.queuedAt)
        .slice(0, Math.max(0, Math.min(free, probe ? 1 : cmd.max)));
      const got = await engine.claim(model.names[agent]!, { owner: `w${run}`, max: cmd.max });
      expect(got.map((r) => r.id)).toEqual(expected.map((r) => r.id));
      if (probe && got.length > 0) Object.assign(model.agents[agent]!.breaker, { state: 'half_open', probe: got[0]!.id });
      got.forEach((row, i) => {
        const m = expected[i]!;
        expect(m.cancelRequestedAt).toBeNull();
        Object.assign(m, {
          status: 'running',
          attempt: m.attempt + 1,
          startedAt: now,
          leaseExpiresAt: now + LEASE_MS,
          deadlineAt: now + spec.timeout_seconds * 1000,
          token: row.lease_token,
        });
        expect(m.granted).not.toContain(row.lease_token);
        m.granted.push(row.lease_token!);
      });
      return;
    }
    case 'heartbeat': {
      const m = target(model, cmd.ex);
      if (!m) return;
      const t = tokenFor(m, cmd.token);
      const got = await outcome(engine.heartbeat(m.id, t));
      if (m.status === 'running' && t === m.token) {
        m.leaseExpiresAt = now + LEASE_MS;
        model.held.delete(m.agent);
        expect(got).toEqual({
          ok: true,
          value: { lease_expires_at: m.leaseExpiresAt, cancel_requested: m.cancelRequestedAt !== null, deadline_at: m.deadlineAt },
        });
      } else {
        expect(got).toEqual({ ok: false, code: 'lease_lost' });
      }
      return;
    }
    case 'complete': {
      const m = target(model, cmd.ex, true);
      if (!m) return;
      const t = tokenFor(m, cmd.token);
      const error = cmd.status === 'failed' ? { code: 'boom', message: 'it broke' } : null;
      const usage = { cost_usd: cmd.cost };
      const got = await outcome(engine.complete(m.id, t, { status: cmd.status, error, usage }, 'worker'));
      // Landable: running, or re-queued and not yet re-claimed (same token).
      if ((m.status === 'running' || m.status === 'queued') && t === m.token) {
        expect(got.ok).toBe(true);
        Object.assign(m, { status: cmd.status, leaseExpiresAt: null, errorCode: error?.code ?? null });
        const spent = model.agents[m.agent]!.spent;
        if (model.specs[m.agent]!.budget) spent.set(hourOf(now), (spent.get(hourOf(now)) ?? 0) + cmd.cost);
        model.finished(m, now);
        await adoptChained(model, now);
      } else {
        expect(got).toEqual({ ok: false, code: 'lease_lost' });
      }
      return;
    }
    case 'release': {
      const m = target(model, cmd.ex);
      if (!m) return;
      const t = tokenFor(m, cmd.token);
      const got = await outcome(engine.release(m.id, t, 'worker'));
      if (m.status === 'running' && t === m.token) {
        expect(got.ok).toBe(true);
        if (m.cancelRequestedAt !== null) {
          Object.assign(m, { status: 'cancelled', leaseExpiresAt: null });
          model.finished(m, now);
        } else Object.assign(m, { status: 'queued', attempt: m.attempt - 1, leaseExpiresAt: null, deadlineAt: null });
      } else {
        expect(got).toEqual({ ok: false, code: 'lease_lost' });
      }
      return;
    }
    case 'cancel': {
      const m = target(model, cmd.ex);
      if (!m) return;
      const got = await outcome(engine.cancel(m.id, 'user'));
      if (m.status === 'queued') {
        Object.assign(m, { status: 'cancelled', errorCode: 'cancelled_by_user' });
        model.finished(m, now);
      } else if (m.status === 'running') m.cancelRequestedAt ??= now;
      if (isTerminal(m.status) && m.status !== 'cancelled') expect(got).toEqual({ ok: false, code: 'invalid_transition' });
      else expect(got.ok && got.value.status).toBe(m.status);
      return;
    }
    case 'advance':
      clock.advance(cmd.ms);
      return;
    case 'pause':
    case 'resume': {
      const a = model.agents[cmd.agent % model.specs.length]!;
      const name = model.names[cmd.agent % model.specs.length]!;
      const got = cmd.kind === 'pause' ? await engine.agents.pause(name, 'model', 'model') : await engine.agents.resume(name, 'model');
      expect(got.changed).toBe(a.paused !== (cmd.kind === 'pause'));
      a.paused = cmd.kind === 'pause';
      return;
    }
    case 'closeBreaker': {
      const a = model.agents[cmd.agent % model.specs.length]!;
      const got = await engine.agents.closeBreaker(model.names[cmd.agent % model.specs.length]!, 'model');
      expect(got.changed).toBe(a.breaker.state !== 'closed');
      a.breaker = closedBreaker();
      return;
    }
    case 'group': {
      // Every member or none: a group whose members do not all fit in their backlogs is refused whole.
      const agents = cmd.agents.map((a) => a % model.specs.length);
      const fits = agents.every((a) => model.of(a, 'queued').length + agents.filter((x) => x === a).length <= model.specs[a]!.max_backlog);
      const got = await outcome(engine.groups.create({ members: agents.map((a) => ({ agent: model.names[a]!, message: 'g' })) }, 'model'));
      if (!fits) {
        expect(got).toEqual({ ok: false, code: 'group_refused' });
        return;
      }
      if (!got.ok) throw new Error(`group refused: ${got.code}`);
      got.value.members.forEach((member, i) => model.rows.push(queuedRow(member.execution_id, agents[i]!, 0, now)));
      return;
    }
    case 'reap': {
      const mine = new Set(model.names);
      const got = (await engine.reapOnce()).filter((r) => mine.has(r.agent)).map((r) => [r.id, r.kind]);
      const expected = model.reap(now);
      expect(sorted(got)).toEqual(sorted(expected));
      return;
    }
  }
}

const sorted = (xs: string[][]) => [...xs].sort((a, b) => a.join().localeCompare(b.join()));

// ── checks after every step ─────────────────────────────────────────────────

async function check(model: Model, cmd: Cmd): Promise<void> {
  const rows = await ts.store.db.selectFrom('executions').selectAll().where('agent', 'in', model.names).execute();
  const events = await ts.store.db.selectFrom('execution_events').selectAll().where('agent', 'in', model.names).orderBy('id').execute();
  const byId = new Map(rows.map((r) => [r.id, r]));
  const log = new Map<string, ExecutionEventRow[]>();
  for (const e of events) log.set(e.execution_id, [...(log.get(e.execution_id) ?? []), e]);
  const at = `after ${JSON.stringify(cmd)}`;

  expect(rows.length, at).toBe(model.rows.length);
  for (const m of model.rows) {
    const row = byId.get(m.id)!;
    // The rows are what the model says.
    expect(pick(row), `${at}: ${m.id}`).toEqual({
      status: m.status,
      attempt: m.attempt,
      lease_token: m.token,
      lease_expires_at: m.status === 'running' ? m.leaseExpiresAt : null,
      deadline_at: m.status === 'running' || m.status === 'queued' ? m.deadlineAt : row.deadline_at,
      cancel_requested_at: m.cancelRequestedAt,
      error_code: isTerminal(m.status) ? m.errorCode : null,
    });
    invariantsOfOne(row, log.get(m.id) ?? [], at);
  }

  // The holds are what the model says.
  const agents = await ts.store.db
    .selectFrom('agents')
    .select(['name', 'paused_at', 'breaker_state'])
    .where('name', 'in', model.names)
    .execute();
  for (const a of agents) {
    const m = model.agents[model.names.indexOf(a.name)]!;
    expect({ paused: a.paused_at !== null, breaker: a.breaker_state }, `${at}: ${a.name}`).toEqual({
      paused: m.paused,
      breaker: m.breaker.state,
    });
  }

  // Seats: never more running than the cap, now or at any admission. The counters admission and
  // creation decide from (running_count, the backlog counters) equal the rows.
  const counted = await liveCountsByAgent(ts.store.db, model.names);
  model.names.forEach((name, i) => {
    const running = rows.filter((r) => r.agent === name && r.status === 'running').length;
    const queued = rows.filter((r) => r.agent === name && r.status === 'queued').length;
    expect(running, `${at}: running on ${name}`).toBeLessThanOrEqual(model.specs[i]!.max_parallel);
    expect(counted.get(name) ?? { running: 0, queued: 0 }, `${at}: counters of ${name}`).toEqual({ running, queued });
  });
  for (const e of events) {
    if (e.from_status === 'queued' && e.to_status === 'running') expect(e.seats_in_use!, at).toBeLessThanOrEqual(e.seat_cap!);
  }
}

const pick = (r: ExecutionRow) => ({
  status: r.status,
  attempt: r.attempt,
  lease_token: r.lease_token,
  lease_expires_at: r.lease_expires_at,
  deadline_at: r.deadline_at,
  cancel_requested_at: r.cancel_requested_at,
  error_code: r.error_code,
});

function invariantsOfOne(row: ExecutionRow, events: ExecutionEventRow[], at: string): void {
  const where = `${at}: ${row.id}`;
  // The event log is one unbroken chain that ends at the row's status, never leaving a terminal state.
  expect(events.length, where).toBeGreaterThan(0);
  let prev: ExecutionStatus | null = null;
  for (const e of events) {
    expect(e.from_status, `${where}: event ${e.id}`).toBe(prev);
    expect(prev !== null && isTerminal(prev), `${where}: event ${e.id} leaves ${prev}`).toBe(false);
    prev = e.to_status;
  }
  expect(prev, where).toBe(row.status);

  // A running row is a seat with a lease.
  if (row.status === 'running') {
    expect(row.lease_owner, where).not.toBeNull();
    expect(row.lease_token, where).not.toBeNull();
    expect(row.lease_expires_at, where).not.toBeNull();
    expect(row.attempt, where).toBeGreaterThanOrEqual(1);
  }

  // Attempts: each admission charges one, each graceful release or shared-cause lapse gives it back.
  const admissions = events.filter((e) => e.from_status === 'queued' && e.to_status === 'running');
  const releases = events.filter((e) => e.reason === 'released' || e.reason === 'requeued_shared');
  expect(row.attempt, where).toBe(admissions.length - releases.length);
  expect(row.attempt, where).toBeGreaterThanOrEqual(0);
  expect(row.attempt, where).toBeLessThanOrEqual(row.max_redeliveries + 1);
  if (admissions.length > 0) expect(events.at(-1)!.attempt, where).toBe(row.attempt);

  // Terminal rows say when they ended, and how long they ran if they ever started (E-03, G-03).
  if (isTerminal(row.status)) {
    expect(row.completed_at, where).not.toBeNull();
    if (row.started_at !== null) expect(row.duration_ms, where).not.toBeNull();
  }
  if (row.started_at !== null) expect(row.queued_at!, where).toBeLessThanOrEqual(row.started_at);
  if (row.completed_at !== null && row.started_at !== null) expect(row.started_at, where).toBeLessThanOrEqual(row.completed_at);
}

// ── the property ────────────────────────────────────────────────────────────

describe(`model (${STORE_KIND})`, () => {
  it('random command sequences keep the rows equal to the model and every invariant true', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(agentArb, { minLength: 2, maxLength: 3 }),
        fc.array(cmdArb, { minLength: 10, maxLength: 40, size: 'max' }),
        fc.boolean(),
        async (specs, cmds, chain) => {
          // Fresh agents per run (shrinking included), so runs never see each other's rows.
          const r = ++run;
          const names = specs.map((_, i) => `m${r}-${i}`);
          for (const [i, { breaker, budget, ...spec }] of specs.entries()) {
            await engine.agents.create(
              {
                name: names[i]!,
                lease_ttl_seconds: LEASE_MS / 1000,
                ...spec,
                breaker: breaker ? BREAKER : null,
                budget: budget ? BUDGET : null,
              },
              'model',
            );
          }
          if (chain) {
            const sub = { source_agent: names[0]!, target_agent: names[1]!, on: 'succeeded' as const, message: 'next' };
            await engine.subscriptions.create(sub, 'model');
          }
          const model = new Model(names, specs, chain);
          for (const cmd of cmds) {
            await step(model, cmd);
            await check(model, cmd);
          }
        },
      ),
      { numRuns: 50, seed: process.env.BATON_MODEL_SEED ? Number(process.env.BATON_MODEL_SEED) : undefined },
    );
  });
});
