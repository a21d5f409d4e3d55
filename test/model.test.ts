import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_FORGIVEN_LAPSES, SHARED_LAPSE_THRESHOLD } from '../src/domain/admission.ts';
import { BatonError } from '../src/domain/errors.ts';
import { isTerminal, type CompletionStatus, type ExecutionStatus } from '../src/domain/states.ts';
import { Engine } from '../src/engine/engine.ts';
import { liveCountsByAgent } from '../src/engine/live-counts.ts';
import type { ExecutionEventRow, ExecutionRow } from '../src/store/schema.ts';
import { manualClock } from './helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from './helpers/store.ts';

// Model-based test: random command sequences run against the engine and against a small
// in-memory model of §3 of the design. After every command the rows must equal the model and
// the invariants must hold on the rows and on the event log.

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
  | { kind: 'complete'; ex: Target; token: number; status: CompletionStatus }
  | { kind: 'release'; ex: Target; token: number }
  | { kind: 'cancel'; ex: Target }
  | { kind: 'advance'; ms: number }
  | { kind: 'reap' };

interface AgentSpec {
  max_parallel: number;
  max_backlog: number;
  max_redeliveries: number;
  /** Some agents time out after the backlog expiry, so a re-queue and an expiry can share a reaper pass. */
  timeout_seconds: number;
}

const agentArb: fc.Arbitrary<AgentSpec> = fc.record({
  max_parallel: fc.integer({ min: 1, max: 2 }),
  max_backlog: fc.integer({ min: 2, max: 4 }),
  max_redeliveries: fc.integer({ min: 0, max: 2 }),
  timeout_seconds: fc.constantFrom(45, 150),
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
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('complete' as const),
      ex,
      token,
      status: fc.constantFrom<CompletionStatus>('succeeded', 'failed', 'cancelled'),
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

class Model {
  readonly rows: Modelled[] = [];
  /** Agents under a shared-cause lapse hold: set by the reaper, ended by a claim or heartbeat. */
  readonly held = new Set<number>();
  constructor(
    readonly names: string[],
    readonly specs: AgentSpec[],
  ) {}

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
      }
    }
    return out;
  }
}

function target(model: Model, t: Target): Modelled | undefined {
  const live = model.rows.filter((r) => !isTerminal(r.status));
  const pool = t.live && live.length > 0 ? live : model.rows;
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
      model.rows.push({
        id: got.value.id,
        agent,
        priority: cmd.priority,
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
      return;
    }
    case 'claim': {
      const agent = cmd.agent % model.specs.length;
      model.held.delete(agent); // a claim is a worker seen again: it ends the hold and admits
      const spec = model.specs[agent]!;
      const free = spec.max_parallel - model.of(agent, 'running').length;
      const expected = model
        .of(agent, 'queued')
        .sort((a, b) => a.priority - b.priority || a.queuedAt - b.queuedAt)
        .slice(0, Math.max(0, Math.min(free, cmd.max)));
      const got = await engine.claim(model.names[agent]!, { owner: `w${run}`, max: cmd.max });
      expect(got.map((r) => r.id)).toEqual(expected.map((r) => r.id));
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
      const m = target(model, cmd.ex);
      if (!m) return;
      const t = tokenFor(m, cmd.token);
      const error = cmd.status === 'failed' ? { code: 'boom', message: 'it broke' } : null;
      const got = await outcome(engine.complete(m.id, t, { status: cmd.status, error }, 'worker'));
      // Landable: running, or re-queued and not yet re-claimed (same token).
      if ((m.status === 'running' || m.status === 'queued') && t === m.token) {
        expect(got.ok).toBe(true);
        Object.assign(m, { status: cmd.status, leaseExpiresAt: null, errorCode: error?.code ?? null });
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
        if (m.cancelRequestedAt !== null) Object.assign(m, { status: 'cancelled', leaseExpiresAt: null });
        else Object.assign(m, { status: 'queued', attempt: m.attempt - 1, leaseExpiresAt: null, deadlineAt: null });
      } else {
        expect(got).toEqual({ ok: false, code: 'lease_lost' });
      }
      return;
    }
    case 'cancel': {
      const m = target(model, cmd.ex);
      if (!m) return;
      const got = await outcome(engine.cancel(m.id, 'user'));
      if (m.status === 'queued') Object.assign(m, { status: 'cancelled', errorCode: 'cancelled_by_user' });
      else if (m.status === 'running') m.cancelRequestedAt ??= now;
      if (isTerminal(m.status) && m.status !== 'cancelled') expect(got).toEqual({ ok: false, code: 'invalid_transition' });
      else expect(got.ok && got.value.status).toBe(m.status);
      return;
    }
    case 'advance':
      clock.advance(cmd.ms);
      return;
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
        async (specs, cmds) => {
          // Fresh agents per run (shrinking included), so runs never see each other's rows.
          const r = ++run;
          const names = specs.map((_, i) => `m${r}-${i}`);
          for (const [i, spec] of specs.entries()) {
            // The model has no circuit breaker (on by default for new agents): off here; test/breaker.test.ts covers it.
            await engine.agents.create({ name: names[i]!, lease_ttl_seconds: LEASE_MS / 1000, breaker: null, ...spec }, 'model');
          }
          const model = new Model(names, specs);
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
