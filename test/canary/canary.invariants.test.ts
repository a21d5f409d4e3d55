import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../src/config.ts';
import { diagnose } from '../../src/canary/catalogue.ts';
import { DEFAULT_TIMING, graces } from '../../src/canary/graces.ts';
import { runCanaryOnce, type CycleReport } from '../../src/canary/run.ts';
import { DISPATCH_POLL_MS } from '../../src/delivery/dispatcher.ts';
import { Engine } from '../../src/engine/engine.ts';
import { BREAKER_DEFAULTS } from '../../src/domain/breaker.ts';
import { SCHEDULER_INTERVAL_MS } from '../../src/engine/triggers/scheduler.ts';
import { manualClock } from '../helpers/clock.ts';
import { runningRow, withoutLeaseCheck, withTableRenamed, writeRow } from '../helpers/canary.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';
import { agentMaker } from '../helpers/agents.ts';

// Every invariant twice: the violating state written into the database fires with the right
// diagnosis, and a healthy control stays silent. Each test uses its own agent and subjects, so
// rows earlier tests left behind do not matter.

let ts: TestStore;
let engine: Engine;
const clock = manualClock();

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'test-node' });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

const newAgent = agentMaker(() => engine, 'canary', { max_parallel: 1, max_backlog: 10 });

const cycle = () => runCanaryOnce({ store: ts.store, clock });

/** The findings of one invariant about one subject in a fresh cycle. */
async function findings(id: string, subject: string, report?: CycleReport) {
  const r = report ?? (await cycle());
  const check = r.checks.find((c) => c.id === id);
  if (!check) throw new Error(`no check ${id}`);
  return check.findings.filter((f) => f.subject === subject).map((f) => f.reason);
}

/** The stored open violation of `id` about `subject`, with its diagnosis. */
async function openViolation(id: string, subject: string) {
  return ts.store.db
    .selectFrom('canary_violations')
    .selectAll()
    .where('invariant', '=', id)
    .where('subject', '=', subject)
    .where('resolved_at', 'is', null)
    .executeTakeFirst();
}

async function expectFires(id: string, subject: string, reason: string, component: RegExp) {
  expect(await findings(id, subject)).toEqual([reason]);
  const v = await openViolation(id, subject);
  expect(v?.reason).toBe(reason);
  expect(diagnose(id, reason)).toMatch(component);
}

const admitOne = async (agent: string) => {
  const [row] = await engine.claim(agent, { owner: 'worker:test' });
  return row!;
};

describe('graces are derived from the components they watch', () => {
  it('pins each grace to its constant', () => {
    expect(graces.leaseLapse(DEFAULT_TIMING)).toBe(2 * DEFAULTS.reaperIntervalMs);
    expect(graces.timeout(DEFAULT_TIMING)).toBe(2 * DEFAULTS.reaperIntervalMs);
    expect(graces.backlogExpiry(DEFAULT_TIMING)).toBe(DEFAULTS.backlogExpiryMs + 2 * DEFAULTS.reaperIntervalMs);
    expect(graces.dispatchSla(DEFAULT_TIMING)).toBe(10 * DEFAULTS.claimPollMs);
    expect(graces.dispatchSla({ ...DEFAULT_TIMING, dispatchPollMs: DISPATCH_POLL_MS })).toBe(10 * DISPATCH_POLL_MS);
    expect(graces.schedulerLag({ ...DEFAULT_TIMING, schedulerIntervalMs: SCHEDULER_INTERVAL_MS })).toBe(2 * SCHEDULER_INTERVAL_MS);
    // A grace shorter than a reaper interval would page on every healthy lapse the reaper has not reached yet.
    expect(graces.leaseLapse(DEFAULT_TIMING)).toBeGreaterThan(DEFAULTS.reaperIntervalMs * 1.2);
  });
});

describe('E-01 lapsed lease / past timeout', () => {
  const grace = graces.leaseLapse(DEFAULT_TIMING);

  it('a leased row lapsed inside the grace is silent; the same row past the grace fires', async () => {
    const agent = await newAgent();
    const now = clock();
    const row = await writeRow(ts.store, now, runningRow(now, agent, { lease_expires_at: now - grace + 500 }));
    expect(await findings('E-01', row.id)).toEqual([]);
    clock.advance(1_000);
    await expectFires('E-01', row.id, 'lease_lapsed', /reaper/);
  });

  it('a running row past its deadline beyond the grace fires as the timeout sweep', async () => {
    const agent = await newAgent();
    const now = clock();
    const row = await writeRow(ts.store, now, runningRow(now, agent, { deadline_at: now - grace - 1 }));
    await expectFires('E-01', row.id, 'past_timeout', /timeout sweep/);
  });

  it('never fires for a row holding no lapsed lease: live lease, handed back, or (CHECK bypassed) no lease at all', async () => {
    const agent = await newAgent({ max_parallel: 3 });
    const now = clock();
    const live = await writeRow(ts.store, now, runningRow(now, agent));
    // Re-queued by the reaper long ago: lease cleared, token kept, started_at old.
    const handedBack = await writeRow(ts.store, now, {
      agent,
      status: 'queued',
      attempt: 1,
      lease_token: 'ls_old',
      lease_owner: 'worker:gone',
      started_at: now - 3_600_000,
      queued_at: now - 3_700_000,
    });
    let report: CycleReport | undefined;
    let unleased = '';
    await withoutLeaseCheck(ts.store, async () => {
      const r = await writeRow(ts.store, now, { ...runningRow(now, agent), lease_expires_at: null });
      unleased = r.id;
      report = await cycle();
      await ts.store.db
        .updateTable('executions')
        .set({ status: 'failed', completed_at: now, duration_ms: 0 })
        .where('id', '=', r.id)
        .execute();
    });
    for (const id of [live.id, handedBack.id, unleased]) expect(await findings('E-01', id, report)).toEqual([]);
    // S-03 is the check that owns a missing lease.
    expect(await findings('S-03', unleased, report)).toEqual(['lease_missing']);
  });
});

describe('E-02 no terminal state is left (event log)', () => {
  it('fires on an event leaving a terminal state', async () => {
    const agent = await newAgent();
    const row = await writeRow(ts.store, clock(), { agent, status: 'succeeded', completed_at: clock() });
    await ts.store.db
      .insertInto('execution_events')
      .values({
        execution_id: row.id,
        agent,
        from_status: 'succeeded',
        to_status: 'queued',
        at: clock(),
        actor: 'bug',
        reason: null,
        attempt: 1,
        seats_in_use: null,
        seat_cap: null,
      })
      .execute();
    await expectFires('E-02', row.id, 'left_terminal', /compare-and-set/);
  });

  it('is silent for a run that went queued → running → succeeded through the engine', async () => {
    const agent = await newAgent();
    const sub = await engine.submit(agent, { message: 'ok' }, 'test');
    const row = await admitOne(agent);
    await engine.complete(row.id, row.lease_token!, { status: 'succeeded', result: { ok: true } }, 'worker:test');
    expect(await findings('E-02', sub.id)).toEqual([]);
  });
});

describe('E-03 terminal rows have completed_at and duration', () => {
  it('fires on a terminal row without completed_at, and a ran row without duration', async () => {
    const agent = await newAgent();
    const a = await writeRow(ts.store, clock(), { agent, status: 'failed' });
    const b = await writeRow(ts.store, clock(), { agent, status: 'succeeded', started_at: clock(), completed_at: clock() });
    await expectFires('E-03', a.id, 'terminal_without_completed_at', /transition/);
    await expectFires('E-03', b.id, 'ran_without_duration', /transition/);
  });

  it('is silent for rows the engine ended (completed, cancelled while queued)', async () => {
    const agent = await newAgent();
    const s = await engine.submit(agent, { message: 'x' }, 'test');
    const row = await admitOne(agent);
    await engine.complete(row.id, row.lease_token!, { status: 'failed' }, 'worker:test');
    const q = await engine.submit(agent, { message: 'y' }, 'test');
    await engine.cancel(q.id, 'test');
    const r = await cycle();
    expect(await findings('E-03', s.id, r)).toEqual([]);
    expect(await findings('E-03', q.id, r)).toEqual([]);
  });
});

describe('E-04 queued rows carry valid metadata', () => {
  it('fires on a queued row of a missing agent, and one whose payload is not JSON', async () => {
    const agent = await newAgent();
    const orphan = await writeRow(ts.store, clock(), { agent: 'no-such-agent' });
    const broken = await writeRow(ts.store, clock(), { agent, payload: '{not json' });
    // JSON5 and trailing text are not JSON either, on both stores (the check runs in the database).
    const trailing = await writeRow(ts.store, clock(), { agent, payload: '{"a":1} x' });
    const badOrigin = await writeRow(ts.store, clock(), { agent, origin: "{a: 'json5'}" });
    await expectFires('E-04', orphan.id, 'agent_missing', /agent/);
    await expectFires('E-04', broken.id, 'payload_invalid', /create/);
    await expectFires('E-04', trailing.id, 'payload_invalid', /create/);
    await expectFires('E-04', badOrigin.id, 'origin_invalid', /create/);
  });

  it('is silent for submitted rows, including a re-queued one on its last delivery', async () => {
    const agent = await newAgent();
    const s = await engine.submit(agent, { message: 'x', payload: { a: [1, 2] } }, 'test');
    const requeued = await writeRow(ts.store, clock(), { agent, attempt: 3, max_redeliveries: 3, started_at: clock() });
    const r = await cycle();
    expect(await findings('E-04', s.id, r)).toEqual([]);
    expect(await findings('E-04', requeued.id, r)).toEqual([]);
  });
});

describe('E-04 reads the queue a slice a cycle', () => {
  const queuedRows = async () =>
    Number(
      (
        await ts.store.db
          .selectFrom('executions')
          .select((eb) => eb.fn.countAll().as('n'))
          .where('status', '=', 'queued')
          .executeTakeFirstOrThrow()
      ).n,
    );

  it('finds a broken row within a lap of the queue, keeps it open while other slices are read, and resolves it once fixed', async () => {
    const agent = await newAgent();
    // A cycle with the default slice reads the whole queue and starts the next lap at its newest row.
    await cycle();
    const t = clock();
    const bad = await writeRow(ts.store, t, { agent, payload: '{sliced' });
    for (let i = 1; i <= 4; i++) await writeRow(ts.store, t, { agent, created_at: t + i });
    const sliced = () => runCanaryOnce({ store: ts.store, clock, sliceRows: 2 });
    // Four rows are newer than the broken one: the first slice of two does not reach it.
    expect(await findings('E-04', bad.id, await sliced())).toEqual([]);
    const lap = Math.ceil((await queuedRows()) / 2) + 1;
    let found = 0;
    for (let i = 0; i < lap && !found; i++) if ((await findings('E-04', bad.id, await sliced())).length) found = i + 1;
    expect(found).toBeGreaterThan(0);
    // Later cycles read other slices, and the open violation is judged again in each.
    for (let i = 0; i < 3; i++) expect(await findings('E-04', bad.id, await sliced())).toEqual(['payload_invalid']);
    expect((await openViolation('E-04', bad.id))?.reason).toBe('payload_invalid');
    await ts.store.db.updateTable('executions').set({ payload: '{}' }).where('id', '=', bad.id).execute();
    expect(await findings('E-04', bad.id, await sliced())).toEqual([]);
    expect(await openViolation('E-04', bad.id)).toBeUndefined();
  });

  it('reads the whole queue in a full check', async () => {
    const agent = await newAgent();
    await cycle();
    const t = clock();
    const bad = await writeRow(ts.store, t, { agent, origin: 'not json' });
    for (let i = 1; i <= 4; i++) await writeRow(ts.store, t, { agent, created_at: t + i });
    const r = await runCanaryOnce({ store: ts.store, clock, sliceRows: 2, full: true });
    expect(await findings('E-04', bad.id, r)).toEqual(['origin_invalid']);
    await ts.store.db.updateTable('executions').set({ status: 'cancelled', completed_at: t }).where('id', '=', bad.id).execute();
  });
});

describe('E-06 no enabled schedule overdue beyond its misfire grace', () => {
  const grace = graces.schedulerLag(DEFAULT_TIMING);
  let sid = 0;
  async function schedule(agent: string, next: number | null, enabled = 1, misfireS = 60) {
    const id = `sch_canary_${++sid}`;
    const now = clock();
    await sql`INSERT INTO schedules (id, agent, name, cron, timezone, message, payload, enabled, overlap_policy, misfire_policy, misfire_grace_seconds, priority, next_run_at, created_at, updated_at)
      VALUES (${id}, ${agent}, ${id}, '* * * * *', 'UTC', 'tick', 'null', ${enabled}, 'skip', 'run_once', ${misfireS}, 0, ${next}, ${now}, ${now})`.execute(
      ts.store.db,
    );
    return id;
  }

  it('fires on an enabled schedule overdue beyond misfire grace + two scheduler ticks', async () => {
    const agent = await newAgent();
    const id = await schedule(agent, clock() - 60_000 - grace - 1);
    await expectFires('E-06', id, 'schedule_overdue', /scheduler/);
  });

  it('is silent inside the grace, for a future run and for a disabled schedule', async () => {
    const agent = await newAgent();
    const inside = await schedule(agent, clock() - 60_000 - grace + 500);
    const future = await schedule(agent, clock() + 60_000);
    const disabled = await schedule(agent, null, 0);
    const r = await cycle();
    for (const id of [inside, future, disabled]) expect(await findings('E-06', id, r)).toEqual([]);
  });

  it('a missing schedules table is not a clean E-06: the snapshot fails (H-01)', async () => {
    await withTableRenamed(ts.store, 'schedules', async () => {
      const r = await cycle();
      expect(r.ok).toBe(false);
      expect(r.checks.find((x) => x.id === 'E-06')).toBeUndefined();
      expect(await findings('H-01', 'canary', r)).toEqual(['snapshot_failed']);
    });
    expect((await cycle()).ok).toBe(true);
  });
});

describe('E-07 retry_of points to an execution of the same agent', () => {
  it("fires on a retry of another agent's execution", async () => {
    const a = await newAgent();
    const b = await newAgent();
    const first = await writeRow(ts.store, clock(), { agent: a, status: 'failed', completed_at: clock() });
    const retry = await writeRow(ts.store, clock(), { agent: b, retry_of: first.id, trigger_kind: 'retry' });
    await expectFires('E-07', retry.id, 'retry_other_agent', /retry path/);
  });

  it('is silent for a retry of the same agent', async () => {
    const a = await newAgent();
    const first = await writeRow(ts.store, clock(), { agent: a, status: 'failed', completed_at: clock() });
    const retry = await writeRow(ts.store, clock(), { agent: a, retry_of: first.id, trigger_kind: 'retry' });
    expect(await findings('E-07', retry.id)).toEqual([]);
  });
});

describe('E-08 cancellation is sticky', () => {
  it('fires when a cancelled row is later written with another state', async () => {
    const agent = await newAgent();
    const s = await engine.submit(agent, { message: 'x' }, 'test');
    await engine.cancel(s.id, 'test');
    // A buggy writer without a status guard:
    await ts.store.db
      .updateTable('executions')
      .set({ status: 'succeeded', changed_at: clock(), changed_by: 'bug' })
      .where('id', '=', s.id)
      .execute();
    const r = await cycle();
    expect(await findings('E-08', s.id, r)).toEqual(['cancel_overwritten']);
    expect(await findings('E-02', s.id, r)).toEqual(['left_terminal']);
    expect(diagnose('E-08', 'cancel_overwritten')).toMatch(/ignored cancellation/);
  });

  it('is silent for a row cancelled while running and ended as cancelled', async () => {
    const agent = await newAgent();
    const s = await engine.submit(agent, { message: 'x' }, 'test');
    const row = await admitOne(agent);
    await engine.cancel(s.id, 'test');
    await engine.complete(row.id, row.lease_token!, { status: 'cancelled' }, 'worker:test');
    expect(await findings('E-08', s.id)).toEqual([]);
  });
});

describe('S-02 over-admission never happened (event log)', () => {
  it('fires when an admission counted more seats than the cap', async () => {
    const agent = await newAgent({ max_parallel: 1 });
    await engine.submit(agent, { message: 'a' }, 'test');
    await admitOne(agent);
    // A second row made running without the admission path: the trigger records 2 seats of 1.
    const b = await writeRow(ts.store, clock(), { agent });
    const now = clock();
    await ts.store.db
      .updateTable('executions')
      .set({ ...runningRow(now, agent), changed_at: now, changed_by: 'bug' })
      .where('id', '=', b.id)
      .execute();
    await expectFires('S-02', b.id, 'over_admitted', /admission/);
  });

  it('the replay fires even when the recorded seat count lies', async () => {
    const agent = await newAgent({ max_parallel: 1 });
    const a = await writeRow(ts.store, clock(), { agent });
    const b = await writeRow(ts.store, clock(), { agent });
    const ev = (id: string) => ({
      execution_id: id,
      agent,
      from_status: 'queued' as const,
      to_status: 'running' as const,
      at: clock(),
      actor: 'bug',
      reason: 'admitted',
      attempt: 1,
      seats_in_use: 1,
      seat_cap: 1,
    });
    await ts.store.db
      .insertInto('execution_events')
      .values([ev(a.id), ev(b.id)])
      .execute();
    const r = await cycle();
    expect(await findings('S-02', a.id, r)).toEqual([]);
    expect(await findings('S-02', b.id, r)).toEqual(['over_admitted_replay']);
  });

  it('is silent for admissions up to the cap, seats freed and re-used', async () => {
    const agent = await newAgent({ max_parallel: 2 });
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push((await engine.submit(agent, { message: `t${i}` }, 'test')).id);
    const [x, y] = await engine.claim(agent, { owner: 'worker:test', max: 2 });
    await engine.complete(x!.id, x!.lease_token!, { status: 'succeeded' }, 'worker:test');
    await engine.release(y!.id, y!.lease_token!, 'worker:test');
    await engine.claim(agent, { owner: 'worker:test', max: 2 });
    const r = await cycle();
    for (const id of ids) expect(await findings('S-02', id, r)).toEqual([]);
  });
});

describe('S-03 every running row holds a complete lease within its TTL', () => {
  it('fires on a lease reaching further ahead than its TTL', async () => {
    const agent = await newAgent();
    const now = clock();
    const row = await writeRow(
      ts.store,
      now,
      runningRow(now, agent, { lease_expires_at: now + 30_000 + graces.leaseHorizon(DEFAULT_TIMING) + 1_000 }),
    );
    await expectFires('S-03', row.id, 'lease_beyond_ttl', /renew/);
  });

  it('is silent for a lease just granted or renewed', async () => {
    const agent = await newAgent();
    await engine.submit(agent, { message: 'x' }, 'test');
    const row = await admitOne(agent);
    await engine.heartbeat(row.id, row.lease_token!);
    expect(await findings('S-03', row.id)).toEqual([]);
  });
});

describe("S-04 each agent's seat counter equals its running rows", () => {
  it('fires on a counter that drifted from the rows', async () => {
    const agent = await newAgent({ max_parallel: 2 });
    await engine.submit(agent, { message: 'x' }, 'test');
    await admitOne(agent);
    // A writer that bypassed the trigger: the counter says a seat is free that is taken.
    await sql`UPDATE agents SET running_count = running_count - 1 WHERE name = ${agent}`.execute(ts.store.db);
    await expectFires('S-04', agent, 'counter_mismatch', /trigger/);
    await sql`UPDATE agents SET running_count = running_count + 1 WHERE name = ${agent}`.execute(ts.store.db);
    expect(await findings('S-04', agent)).toEqual([]);
  });

  it('is silent through admission, completion, release and cancellation', async () => {
    const agent = await newAgent({ max_parallel: 3 });
    for (let i = 0; i < 4; i++) await engine.submit(agent, { message: `x${i}` }, 'test');
    const rows = await engine.claim(agent, { owner: 'worker:test', max: 3 });
    expect(rows).toHaveLength(3);
    await engine.complete(rows[0]!.id, rows[0]!.lease_token!, { status: 'succeeded' }, 'worker:test');
    await engine.release(rows[1]!.id, rows[1]!.lease_token!, 'worker:test');
    await engine.cancel(rows[2]!.id, 'test');
    expect(await findings('S-04', agent)).toEqual([]);
  });
});

describe("S-05 each agent's backlog counters equal its queued rows", () => {
  it('fires on a counter that drifted from the rows', async () => {
    const agent = await newAgent({ max_parallel: 1 });
    await engine.submit(agent, { message: 'x' }, 'test');
    // A writer that bypassed the trigger: the counters say the queue is empty.
    await sql`UPDATE agents SET queued_out = queued_out + 1 WHERE name = ${agent}`.execute(ts.store.db);
    await expectFires('S-05', agent, 'backlog_counter_mismatch', /trigger/);
    await sql`UPDATE agents SET queued_out = queued_out - 1 WHERE name = ${agent}`.execute(ts.store.db);
    expect(await findings('S-05', agent)).toEqual([]);
  });

  it('fires on an agent whose counter row is missing', async () => {
    const agent = await newAgent({ max_parallel: 1 });
    await sql`DELETE FROM agent_backlog WHERE agent = ${agent}`.execute(ts.store.db);
    await expectFires('S-05', agent, 'backlog_counter_mismatch', /trigger/);
    await sql`INSERT INTO agent_backlog (agent, queued_in) VALUES (${agent}, 0)`.execute(ts.store.db);
    expect(await findings('S-05', agent)).toEqual([]);
  });

  it('is silent through submits, a batch, admission, release, completion and cancellation', async () => {
    const agent = await newAgent({ max_parallel: 3 });
    for (let i = 0; i < 3; i++) await engine.submit(agent, { message: `x${i}` }, 'test');
    await engine.submitMany(agent, [{ message: 'b0' }, { message: 'b1' }], 'test');
    const rows = await engine.claim(agent, { owner: 'worker:test', max: 3 });
    expect(rows).toHaveLength(3);
    await engine.complete(rows[0]!.id, rows[0]!.lease_token!, { status: 'succeeded' }, 'worker:test');
    await engine.release(rows[1]!.id, rows[1]!.lease_token!, 'worker:test');
    await engine.cancel(rows[2]!.id, 'test');
    const [queued] = await ts.store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', agent)
      .where('status', '=', 'queued')
      .execute();
    await engine.cancel(queued!.id, 'test');
    expect(await findings('S-05', agent)).toEqual([]);
  });
});

describe('B-02 push agents: no admissible work waits while seats are free', () => {
  const sla = graces.dispatchSla(DEFAULT_TIMING);
  it('fires for a push agent with free seats and work waiting past the dispatch SLA', async () => {
    const agent = await newAgent({ delivery: 'push', push_url: 'http://127.0.0.1:9/none' });
    await writeRow(ts.store, clock(), { agent, changed_at: clock() - sla - 1_000, queued_at: clock() - sla - 1_000 });
    await expectFires('B-02', agent, 'queued_with_free_seats', /dispatcher/);
  });

  it('is silent with seats full, inside the SLA, for future run_after, and for pull agents', async () => {
    const full = await newAgent({ delivery: 'push', push_url: 'http://127.0.0.1:9/none' });
    const fresh = await newAgent({ delivery: 'push', push_url: 'http://127.0.0.1:9/none' });
    const pull = await newAgent();
    const old = clock() - sla - 1_000;
    await writeRow(ts.store, clock(), runningRow(clock(), full));
    await writeRow(ts.store, clock(), { agent: full, changed_at: old, queued_at: old });
    await writeRow(ts.store, clock(), { agent: fresh, changed_at: clock() - sla + 500 });
    await writeRow(ts.store, clock(), { agent: fresh, changed_at: old, run_after: clock() });
    await writeRow(ts.store, clock(), { agent: pull, changed_at: old, queued_at: old });
    const r = await cycle();
    for (const a of [full, fresh, pull]) expect(await findings('B-02', a, r)).toEqual([]);
  });

  it('is silent for a push agent whose admission is held (paused, breaker open): it admits nothing by design', async () => {
    const paused = await newAgent({ delivery: 'push', push_url: 'http://127.0.0.1:9/none' });
    const broken = await newAgent({ delivery: 'push', push_url: 'http://127.0.0.1:9/none' });
    const old = clock() - sla - 1_000;
    for (const agent of [paused, broken]) await writeRow(ts.store, clock(), { agent, changed_at: old, queued_at: old });
    await engine.agents.pause(paused, 'maintenance', 'test');
    await ts.store.db
      .updateTable('agents')
      .set({
        breaker_config: JSON.stringify(BREAKER_DEFAULTS),
        breaker_state: 'open',
        breaker_opened_at: old,
        breaker_until: clock() + 60_000,
      })
      .where('name', '=', broken)
      .execute();
    const r = await cycle();
    for (const a of [paused, broken]) expect(await findings('B-02', a, r)).toEqual([]);
    // Once the hold ends, the same queue is a finding again.
    await engine.agents.resume(paused, 'test');
    await expectFires('B-02', paused, 'queued_with_free_seats', /dispatcher/);
  });
});

describe('B-05 no queued row outlives the backlog expiry', () => {
  const grace = graces.backlogExpiry(DEFAULT_TIMING);
  it('fires for a row queued longer than expiry + two reaper intervals', async () => {
    const agent = await newAgent();
    const row = await writeRow(ts.store, clock(), { agent, queued_at: clock() - grace - 1, created_at: clock() - grace - 1 });
    await expectFires('B-05', row.id, 'queued_past_expiry', /reaper backlog sweep/);
  });

  it('is silent for a delayed row whose run_after is recent, and a row re-queued recently', async () => {
    const agent = await newAgent();
    const old = clock() - grace - 1;
    const delayed = await writeRow(ts.store, clock(), { agent, queued_at: old, run_after: clock() - 1_000 });
    const requeued = await writeRow(ts.store, clock(), { agent, queued_at: old, started_at: clock() - 1_000, attempt: 1 });
    const r = await cycle();
    expect(await findings('B-05', delayed.id, r)).toEqual([]);
    expect(await findings('B-05', requeued.id, r)).toEqual([]);
  });
});

describe('B-06 queued ≤ max_backlog', () => {
  it('fires when more never-started rows were accepted than max_backlog', async () => {
    const agent = await newAgent({ max_backlog: 2 });
    clock.advance(1);
    for (let i = 0; i < 3; i++) await writeRow(ts.store, clock(), { agent });
    await expectFires('B-06', agent, 'backlog_exceeded', /submit path/);
  });

  it('is silent above the limit for re-queued rows and after max_backlog was lowered', async () => {
    const requeue = await newAgent({ max_backlog: 2 });
    clock.advance(1);
    await engine.submit(requeue, { message: 'a' }, 'test');
    await engine.submit(requeue, { message: 'b' }, 'test');
    for (let i = 0; i < 2; i++) await writeRow(ts.store, clock(), { agent: requeue, attempt: 1, started_at: clock() });
    const lowered = await newAgent({ max_backlog: 5 });
    clock.advance(1);
    for (let i = 0; i < 4; i++) await engine.submit(lowered, { message: `m${i}` }, 'test');
    clock.advance(1);
    await engine.agents.update(lowered, { max_backlog: 1 }, 'test');
    const r = await cycle();
    expect(await findings('B-06', requeue, r)).toEqual([]);
    expect(await findings('B-06', lowered, r)).toEqual([]);
  });
});

describe('G-03 queued_at ≤ started_at ≤ completed_at', () => {
  it('fires on a row that started before it was queued', async () => {
    const agent = await newAgent();
    const now = clock();
    const row = await writeRow(ts.store, now, { ...runningRow(now, agent), queued_at: now + 5_000 });
    await expectFires('G-03', row.id, 'started_before_queued', /clock/);
  });

  it('is silent inside the clock-skew allowance and for ordinary runs', async () => {
    const agent = await newAgent();
    const now = clock();
    const skewed = await writeRow(ts.store, now, { ...runningRow(now, agent), queued_at: now + 500 });
    await engine.submit(agent, { message: 'x' }, 'test');
    const r = await cycle();
    expect(await findings('G-03', skewed.id, r)).toEqual([]);
  });
});

describe('G-04 no recognisable secret stored', () => {
  const token = 'ghp_' + 'A1b2C3d4E5'.repeat(4);
  it('fires on a payload holding a GitHub token, and stores only the kind', async () => {
    const agent = await newAgent();
    const s = await engine.submit(agent, { message: 'deploy', payload: { auth: token } }, 'test');
    await expectFires('G-04', s.id, 'secret_in_payload', /credential/);
    const v = await openViolation('G-04', s.id);
    expect(JSON.stringify(v)).not.toContain(token);
    expect(JSON.parse(v!.detail!)).toEqual({ kind: 'ghp_' });
  });

  it('fires on a log line holding a secret, and is silent for one the log path redacted', async () => {
    const agent = await newAgent();
    const leaky = await writeRow(ts.store, clock(), { agent, status: 'succeeded', completed_at: clock() });
    const clean = await writeRow(ts.store, clock(), { agent, status: 'succeeded', completed_at: clock() });
    const line = (id: string, text: string) =>
      sql`INSERT INTO execution_logs (execution_id, seq, at, stream, line) VALUES (${id}, 1, ${clock()}, 'stdout', ${text})`.execute(
        ts.store.db,
      );
    await line(leaky.id, `export AWS_ACCESS_KEY_ID=AKIA${'ABCDEFGHIJ234567'}`);
    await line(clean.id, 'token ghp_[redacted] used');
    await expectFires('G-04', leaky.id, 'secret_in_log', /log/);
    expect(await findings('G-04', clean.id)).toEqual([]);
  });

  it('fires on a secret in reported usage or an error code (columns a client supplies)', async () => {
    const agent = await newAgent();
    const inUsage = await writeRow(ts.store, clock(), {
      agent,
      status: 'succeeded',
      completed_at: clock(),
      usage: JSON.stringify({ key: 'xoxp-1234567890-abcdefghij' }),
    });
    const inCode = await writeRow(ts.store, clock(), {
      agent,
      status: 'failed',
      completed_at: clock(),
      error_code: 'ASIAABCDEFGHIJKLMNOP',
      error_message: 'x',
    });
    await expectFires('G-04', inUsage.id, 'secret_in_usage', /usage/);
    await expectFires('G-04', inCode.id, 'secret_in_error_code', /error code/);
    expect(JSON.parse((await openViolation('G-04', inCode.id))!.detail!)).toEqual({ kind: 'ASIA' });
  });

  it('is silent for look-alikes that are not secrets', async () => {
    const agent = await newAgent();
    const s = await engine.submit(
      agent,
      { message: 'task-sk-1 on bt_x', payload: { note: 'AKIA-like? no; ghp_short; xoxb-? no; sk-abc' } },
      'test',
    );
    expect(await findings('G-04', s.id)).toEqual([]);
  });
});

describe('H-01 the canary is not blind', () => {
  it('a failing snapshot read is reported, and resolves nothing', async () => {
    const agent = await newAgent();
    const a = await writeRow(ts.store, clock(), { agent, status: 'failed' }); // E-03 open
    await expectFires('E-03', a.id, 'terminal_without_completed_at', /transition/);
    await ts.store.db.updateTable('executions').set({ completed_at: clock() }).where('id', '=', a.id).execute();
    let report: CycleReport | undefined;
    await withTableRenamed(ts.store, 'executions', async () => {
      report = await cycle();
    });
    expect(report!.ok).toBe(false);
    expect(report!.violated).toBe(true);
    expect(await findings('H-01', 'canary', report)).toEqual(['snapshot_failed']);
    // Not read as a clean fleet: the E-03 violation stays open although its row is fixed now.
    expect(await openViolation('E-03', a.id)).toBeDefined();
    const next = await cycle();
    expect(await findings('H-01', 'canary', next)).toEqual([]);
    expect(await openViolation('H-01', 'canary')).toBeUndefined();
    expect(await openViolation('E-03', a.id)).toBeUndefined();
  });

  // H-01's evidence from the last good cycle: the newest event id it saw, and the pruner's total.
  const bumpEvidence = (events: number) =>
    ts.store.db
      .updateTable('canary_checkpoints')
      .set((eb) => ({ event_id: eb('event_id', '+', events) }))
      .where('invariant', '=', 'H-01')
      .execute();

  it('a snapshot that sees older events than an earlier cycle, with no pruning since, is reported', async () => {
    await cycle();
    await bumpEvidence(1000);
    expect(await findings('H-01', 'canary')).toEqual(['snapshot_regressed']);
    expect(diagnose('H-01', 'snapshot_regressed')).toMatch(/wrong database/);
  });

  it('is silent when the pruner explains an older newest event', async () => {
    await cycle();
    await bumpEvidence(1000);
    await ts.store.db
      .updateTable('retention_state')
      .set((eb) => ({ total_executions: eb('total_executions', '+', 5) }))
      .where('id', '=', 'retention')
      .execute();
    expect(await findings('H-01', 'canary')).toEqual([]);
  });

  it('is silent for a healthy read', async () => {
    await cycle(); // the evidence is taken again from this snapshot
    const r = await cycle();
    expect(r.ok).toBe(true);
    expect(await findings('H-01', 'canary', r)).toEqual([]);
  });
});
