import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { BatonError } from '../../src/domain/errors.ts';
import { Engine } from '../../src/engine/engine.ts';
import fc from 'fast-check';
import { Cron } from 'croner';
import { startLoop } from '../../src/engine/loop.ts';
import { compileCron, nextAfter } from '../../src/engine/triggers/cron.ts';
import { purgeIdempotencyOnce } from '../../src/engine/triggers/idempotency.ts';
import { newScheduleId } from '../../src/engine/triggers/schedules.ts';
import { ON_TIME_MS } from '../../src/engine/triggers/fire-plan.ts';
import { schedulerPass, tickSchedulesOnce } from '../../src/engine/triggers/scheduler.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock(Date.UTC(2026, 0, 1, 0, 0, 30));
let n = 0;
let agent: string;
const t = () => engine;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'sched-test', backlogExpiryMs: 7 * 86_400_000 });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});
// Each test sees only its own schedules fire: the ones before it are switched off.
afterEach(async () => {
  await ts.store.db.updateTable('schedules').set({ enabled: 0, next_run_at: null }).execute();
});
beforeEach(async () => {
  agent = `agent-${++n}`;
  await engine.agents.create({ name: agent, max_parallel: 1, max_backlog: 3 }, 'test');
});

const rowsOf = (scheduleId: string) =>
  ts.store.db
    .selectFrom('executions')
    .selectAll()
    .where('schedule_id', '=', scheduleId)
    .orderBy('scheduled_for')
    .orderBy('created_at')
    .execute();
const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

async function refusal(p: Promise<unknown>): Promise<BatonError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof BatonError) return err;
    throw err;
  }
  throw new Error('expected a refusal');
}

describe('schedules', () => {
  it('validates cron and time zone with a message naming the problem', async () => {
    const bad = await refusal(t().schedules.create(agent, { name: 'x', cron: '61 * * * *', message: 'm' }, 'test'));
    expect(bad.code).toBe('validation_error');
    expect(bad.message).toMatch(/body\.cron: '61 \* \* \* \*' is not a valid cron expression/);
    const fields = await refusal(t().schedules.create(agent, { name: 'x', cron: '* * * *', message: 'm' }, 'test'));
    expect(fields.message).toMatch(/body\.cron: .* has 4 fields/);
    const tz = await refusal(t().schedules.create(agent, { name: 'x', cron: '* * * * *', timezone: 'Mars/Olympus', message: 'm' }, 'test'));
    expect(tz.message).toMatch(/body\.timezone: 'Mars\/Olympus' is not an IANA time zone/);
    expect((await refusal(t().schedules.create('no-such-agent', { name: 'x', cron: '* * * * *', message: 'm' }, 'test'))).code).toBe(
      'not_found',
    );
    await t().schedules.create(agent, { name: 'dup', cron: '* * * * *', message: 'm' }, 'test');
    expect((await refusal(t().schedules.create(agent, { name: 'dup', cron: '* * * * *', message: 'm' }, 'test'))).code).toBe(
      'already_exists',
    );
  });

  it('fires once per due time, advances next_run_at, and a disabled schedule creates nothing', async () => {
    clock.set(Date.UTC(2026, 0, 1, 0, 0, 30));
    const s = await t().schedules.create(
      agent,
      { name: 'every-minute', cron: '* * * * *', message: 'tick', payload: { a: 1 }, overlap_policy: 'allow' },
      'test',
    );
    expect(s.next_run_at).toBe(Date.UTC(2026, 0, 1, 0, 1));
    expect(await tickSchedulesOnce(engine)).toEqual([]); // not due yet
    clock.set(Date.UTC(2026, 0, 1, 0, 1, 0, 400));
    const fired = await tickSchedulesOnce(engine);
    expect(fired.map((f) => [f.status, iso(f.scheduled_for)])).toEqual([['queued', '2026-01-01T00:01:00.000Z']]);
    expect(await tickSchedulesOnce(engine)).toEqual([]); // the same due time never fires twice
    const after = await t().schedules.get(s.id);
    expect(after.next_run_at).toBe(Date.UTC(2026, 0, 1, 0, 2));
    expect(after.last_run_at).toBe(Date.UTC(2026, 0, 1, 0, 1));
    const [row] = await rowsOf(s.id);
    expect(row).toMatchObject({ trigger_kind: 'schedule', status: 'queued', message: 'tick', payload: '{"a":1}', agent });
    expect(JSON.parse(row!.origin)).toMatchObject({ schedule_id: s.id });
    // One audit entry per batch (nobody acted), naming the run; none per run.
    expect(await ts.store.db.selectFrom('audit_log').selectAll().where('execution_id', '=', row!.id).execute()).toEqual([]);
    const batches = await ts.store.db.selectFrom('audit_log').selectAll().where('action', '=', 'schedule.batch').execute();
    expect(batches).toHaveLength(1);
    expect(batches[0]).toMatchObject({ subject: null, execution_id: null });
    expect(JSON.parse(batches[0]!.detail!)).toEqual({
      queued: 1,
      skipped: {},
      runs: [{ schedule_id: s.id, execution_id: row!.id, scheduled_for: Date.UTC(2026, 0, 1, 0, 1), status: 'queued' }],
    });

    await t().schedules.update(s.id, { enabled: false }, 'test');
    expect((await t().schedules.get(s.id)).next_run_at).toBeNull();
    clock.set(Date.UTC(2026, 0, 1, 0, 5, 0, 100));
    expect(await tickSchedulesOnce(engine)).toEqual([]);
    expect(await rowsOf(s.id)).toHaveLength(1);
    // Re-enabled: the next due time counts from now, without catching up the disabled period.
    await t().schedules.update(s.id, { enabled: true }, 'test');
    expect((await t().schedules.get(s.id)).next_run_at).toBe(Date.UTC(2026, 0, 1, 0, 6));
  });

  it('overlap skip leaves a skipped already_running row; backlog full leaves backlog_full; next_run_at still advances', async () => {
    clock.set(Date.UTC(2026, 0, 2, 0, 0, 10));
    const s = await t().schedules.create(agent, { name: 'skip', cron: '* * * * *', message: 'm' }, 'test');
    clock.set(Date.UTC(2026, 0, 2, 0, 1, 0, 5));
    const [first] = await tickSchedulesOnce(engine);
    expect(first!.status).toBe('queued');
    clock.set(Date.UTC(2026, 0, 2, 0, 2, 0, 5));
    const [second] = await tickSchedulesOnce(engine);
    expect(second).toMatchObject({ status: 'skipped', reason: 'already_running' });
    const skipped = await ts.store.db.selectFrom('executions').selectAll().where('id', '=', second!.execution_id).executeTakeFirstOrThrow();
    expect(skipped).toMatchObject({
      status: 'skipped',
      error_code: 'already_running',
      scheduled_for: Date.UTC(2026, 0, 2, 0, 2),
      completed_at: clock(),
    });
    expect(skipped.error_message).toContain(first!.execution_id);
    const events = await ts.store.db.selectFrom('execution_events').selectAll().where('execution_id', '=', skipped.id).execute();
    expect(events.map((e) => [e.from_status, e.to_status, e.reason])).toEqual([[null, 'skipped', 'already_running']]);
    expect((await t().schedules.get(s.id)).next_run_at).toBe(Date.UTC(2026, 0, 2, 0, 3));

    // Fill the backlog (max 3) with other work; a queue-policy schedule is then refused by the backlog.
    const q = await t().schedules.create(agent, { name: 'queue', cron: '* * * * *', message: 'm', overlap_policy: 'queue' }, 'test');
    await engine.submit(agent, { message: 'x' }, 'test');
    await engine.submit(agent, { message: 'y' }, 'test');
    clock.set(Date.UTC(2026, 0, 2, 0, 3, 0, 5));
    const fired = await tickSchedulesOnce(engine);
    const byId = Object.fromEntries(fired.map((f) => [f.schedule_id, f]));
    expect(byId[s.id]).toMatchObject({ status: 'skipped', reason: 'already_running' });
    expect(byId[q.id]).toMatchObject({ status: 'skipped', reason: 'backlog_full' });
    expect((await t().schedules.get(q.id)).next_run_at).toBe(Date.UTC(2026, 0, 2, 0, 4));
  });

  it('overlap queue runs one at a time (the next waits in the queue); allow may overlap when seats are free', async () => {
    await engine.agents.update(agent, { max_parallel: 4, max_backlog: 10 }, 'test');
    clock.set(Date.UTC(2026, 0, 2, 1, 0, 10));
    const q = await t().schedules.create(agent, { name: 'q', cron: '* * * * *', message: 'm', overlap_policy: 'queue' }, 'test');
    const a = await t().schedules.create(agent, { name: 'a', cron: '* * * * *', message: 'm', overlap_policy: 'allow' }, 'test');
    for (const m of [1, 2]) {
      clock.set(Date.UTC(2026, 0, 2, 1, m, 0, 5));
      await tickSchedulesOnce(engine);
    }
    const claimed = await engine.claim(agent, { owner: 'w', max: 4 });
    const bySchedule = (rows: { schedule_id: string | null }[], id: string) => rows.filter((r) => r.schedule_id === id).length;
    expect(bySchedule(claimed, q.id)).toBe(1);
    expect(bySchedule(claimed, a.id)).toBe(2);
    expect(await engine.claim(agent, { owner: 'w', max: 4 })).toEqual([]); // the queued one waits though seats are free
    const running = claimed.find((r) => r.schedule_id === q.id)!;
    await engine.complete(running.id, running.lease_token!, { status: 'succeeded' }, 'w');
    const next = await engine.claim(agent, { owner: 'w', max: 4 });
    expect(next.map((r) => r.schedule_id)).toEqual([q.id]);
  });

  it('misfire run_once: after a process was down over several ticks, one catch-up run and missed rows for the rest', async () => {
    clock.set(Date.UTC(2026, 0, 3, 8, 30));
    const s = await t().schedules.create(agent, { name: 'hourly', cron: '0 * * * *', message: 'm', overlap_policy: 'allow' }, 'test');
    // Down from 08:30 to 11:20: 09:00, 10:00 and 11:00 were due; 11:00 is within the 1 h grace.
    clock.set(Date.UTC(2026, 0, 3, 11, 20));
    const fired = await tickSchedulesOnce(engine);
    expect(fired.map((f) => [iso(f.scheduled_for), f.status, f.reason ?? null])).toEqual([
      ['2026-01-03T09:00:00.000Z', 'skipped', 'missed'],
      ['2026-01-03T10:00:00.000Z', 'skipped', 'missed'],
      ['2026-01-03T11:00:00.000Z', 'queued', null],
    ]);
    const rows = await rowsOf(s.id);
    expect(rows.map((r) => [r.status, r.error_code])).toEqual([
      ['skipped', 'missed'],
      ['skipped', 'missed'],
      ['queued', null],
    ]);
    expect((await t().schedules.get(s.id)).next_run_at).toBe(Date.UTC(2026, 0, 3, 12));
  });

  it('misfire beyond the grace, and misfire policy skip: the missed tick is recorded, nothing runs', async () => {
    clock.set(Date.UTC(2026, 0, 4, 8, 30));
    const late = await t().schedules.create(agent, { name: 'grace', cron: '0 9 * * *', message: 'm', misfire_grace_seconds: 600 }, 'test');
    const skip = await t().schedules.create(agent, { name: 'skip', cron: '0 9 * * *', message: 'm', misfire_policy: 'skip' }, 'test');
    clock.set(Date.UTC(2026, 0, 4, 9, 20)); // 20 min late: beyond both
    const fired = await tickSchedulesOnce(engine);
    expect(fired.filter((f) => f.schedule_id === late.id).map((f) => [f.status, f.reason])).toEqual([['skipped', 'missed']]);
    expect(fired.filter((f) => f.schedule_id === skip.id).map((f) => [f.status, f.reason])).toEqual([['skipped', 'missed']]);
    const [row] = await rowsOf(late.id);
    expect(row!.error_message).toMatch(/due at 2026-01-04T09:00:00.000Z, handled 1200 s late/);
    // A tick handled within the on-time window runs under either policy.
    clock.set(Date.UTC(2026, 0, 5, 9, 0) + ON_TIME_MS - 1000);
    const next = await tickSchedulesOnce(engine);
    expect(next.map((f) => f.status).sort()).toEqual(['queued', 'queued']);
  });

  it('DST spring-forward (America/New_York, 2026-03-08): 02:30 does not exist and runs at 03:00 EDT, once', async () => {
    clock.set(Date.UTC(2026, 2, 7, 12));
    const s = await t().schedules.create(
      agent,
      { name: 'spring', cron: '30 2 * * *', timezone: 'America/New_York', message: 'm', overlap_policy: 'allow' },
      'test',
    );
    expect(iso(s.next_run_at)).toBe('2026-03-08T07:00:00.000Z'); // 03:00 EDT
    const seen: string[] = [];
    for (let h = 0; h < 72; h++) {
      clock.set(Date.UTC(2026, 2, 7, 12 + h, 0, 1));
      for (const f of await tickSchedulesOnce(engine)) seen.push(iso(f.scheduled_for)!);
    }
    // 03:00 EDT on the 8th, then 02:30 EDT (06:30 UTC) on the 9th and 10th.
    expect(seen).toEqual(['2026-03-08T07:00:00.000Z', '2026-03-09T06:30:00.000Z', '2026-03-10T06:30:00.000Z']);
  });

  it('DST fall-back (America/New_York, 2026-11-01): 01:30 happens twice on the clock and runs once; an hourly schedule runs every real hour', async () => {
    clock.set(Date.UTC(2026, 9, 31, 12));
    const daily = await t().schedules.create(
      agent,
      { name: 'fall-daily', cron: '30 1 * * *', timezone: 'America/New_York', message: 'm', overlap_policy: 'allow' },
      'test',
    );
    const hourly = await t().schedules.create(
      agent,
      { name: 'fall-hourly', cron: '0 * * * *', timezone: 'America/New_York', message: 'm', overlap_policy: 'allow' },
      'test',
    );
    await engine.agents.update(agent, { max_backlog: 1000 }, 'test');
    const seen: Record<string, string[]> = { [daily.id]: [], [hourly.id]: [] };
    for (let m = 0; m < 48 * 4; m++) {
      clock.set(Date.UTC(2026, 9, 31, 12) + m * 15 * 60_000 + 1000);
      for (const f of await tickSchedulesOnce(engine)) seen[f.schedule_id]!.push(iso(f.scheduled_for)!);
    }
    expect(seen[daily.id]).toEqual(['2026-11-01T05:30:00.000Z', '2026-11-02T06:30:00.000Z']);
    const hours = seen[hourly.id]!.filter((x) => x >= '2026-11-01T04:00' && x <= '2026-11-01T08:00:01');
    // 00:00 EDT, 01:00 EDT, 01:00 EST, 02:00 EST, 03:00 EST: five real hours, none lost or doubled.
    expect(hours).toEqual([
      '2026-11-01T04:00:00.000Z',
      '2026-11-01T05:00:00.000Z',
      '2026-11-01T06:00:00.000Z',
      '2026-11-01T07:00:00.000Z',
      '2026-11-01T08:00:00.000Z',
    ]);
    const rows = await rowsOf(hourly.id);
    expect(new Set(rows.map((r) => r.scheduled_for)).size).toBe(rows.length);
  });

  it('a 6-field (seconds) cron fires every second', async () => {
    clock.set(Date.UTC(2026, 0, 6, 0, 0, 0, 500));
    const s = await t().schedules.create(agent, { name: 'secs', cron: '* * * * * *', message: 'm', overlap_policy: 'allow' }, 'test');
    await engine.agents.update(agent, { max_backlog: 100 }, 'test');
    for (let i = 1; i <= 5; i++) {
      clock.set(Date.UTC(2026, 0, 6, 0, 0, i, 100));
      await tickSchedulesOnce(engine);
    }
    expect((await rowsOf(s.id)).map((r) => iso(r.scheduled_for))).toEqual([1, 2, 3, 4, 5].map((i) => iso(Date.UTC(2026, 0, 6, 0, 0, i))));
  });

  it('deleting a schedule cancels its queued runs and asks running ones to stop; history stays', async () => {
    await engine.agents.update(agent, { max_parallel: 1, max_backlog: 10 }, 'test');
    clock.set(Date.UTC(2026, 0, 7, 0, 0, 10));
    const s = await t().schedules.create(agent, { name: 'del', cron: '* * * * *', message: 'm', overlap_policy: 'allow' }, 'test');
    clock.set(Date.UTC(2026, 0, 7, 0, 1, 0, 5));
    await tickSchedulesOnce(engine);
    const [running] = await engine.claim(agent, { owner: 'w' });
    clock.set(Date.UTC(2026, 0, 7, 0, 2, 0, 5));
    await tickSchedulesOnce(engine);
    const out = await t().schedules.delete(s.id, 'test');
    expect(out).toEqual({ cancelled: 1, cancel_requested: 1 });
    const rows = await rowsOf(s.id);
    expect(rows.map((r) => [r.status, r.cancel_requested_at !== null])).toEqual([
      ['running', true],
      ['cancelled', false],
    ]);
    expect(rows[0]!.id).toBe(running!.id);
    expect((await refusal(t().schedules.get(s.id))).code).toBe('not_found');
    clock.set(Date.UTC(2026, 0, 7, 0, 3, 0, 5));
    expect(await tickSchedulesOnce(engine)).toEqual([]);
  });

  it('the purge pass forgets expired idempotency keys', async () => {
    const at = Date.UTC(2026, 5, 1);
    const key = (k: string, expires: number) => ({
      scope: `agent:${agent}`,
      idem_key: k,
      request_hash: 'h',
      state: 'completed' as const,
      locked_until: 0,
      status_code: 201,
      response: '{}',
      execution_id: null,
      created_at: at - 86_400_000,
      expires_at: expires,
    });
    await ts.store.db
      .insertInto('idempotency_keys')
      .values([key('old', at - 1), key('fresh', at + 1000)])
      .execute();
    clock.set(at);
    expect(await purgeIdempotencyOnce(engine)).toBe(1);
    const left = await ts.store.db.selectFrom('idempotency_keys').select('idem_key').where('scope', '=', `agent:${agent}`).execute();
    expect(left.map((k) => k.idem_key)).toEqual(['fresh']);
  });

  it('deleting an agent removes its schedules and webhooks', async () => {
    const s = await t().schedules.create(agent, { name: 'gone', cron: '* * * * *', message: 'm' }, 'test');
    await t().webhooks.create({ name: 'h', agent }, 'test');
    await t().webhooks.create({ name: 'h2', schedule_id: s.id }, 'test');
    await engine.agents.delete(agent, 'test');
    expect(await ts.store.db.selectFrom('schedules').select('id').where('agent', '=', agent).execute()).toEqual([]);
    expect(await ts.store.db.selectFrom('webhooks').select('id').where('agent', '=', agent).execute()).toEqual([]);
  });
  it('a burst of due schedules fires in bulk: one row and one event per due schedule, one audit row per batch, queued and skipped rows mixed in a batch', async () => {
    const due = Date.UTC(2026, 6, 1, 9, 0);
    const roomy = `${agent}-roomy`;
    await engine.agents.create({ name: roomy, max_backlog: 1000, max_redeliveries: 7, timeout_seconds: 99 }, 'test');
    // More than one batch (400): 300 on an agent with room, 150 on one whose backlog holds 3.
    const schedule = (i: number, on: string) => ({
      id: newScheduleId(),
      agent: on,
      name: `burst-${i}`,
      cron: '0 9 * * *',
      timezone: 'UTC',
      message: `m-${i}`,
      payload: '{"i":1}',
      enabled: 1,
      overlap_policy: i % 2 ? ('queue' as const) : ('allow' as const),
      misfire_policy: 'run_once' as const,
      misfire_grace_seconds: 3600,
      retry_policy: null,
      priority: i % 3,
      next_run_at: due,
      last_run_at: null,
      created_at: due - 1000,
      updated_at: due - 1000,
    });
    const rows = [
      ...Array.from({ length: 300 }, (_, i) => schedule(i, roomy)),
      ...Array.from({ length: 150 }, (_, i) => schedule(300 + i, agent)),
    ];
    await ts.store.db.insertInto('schedules').values(rows).execute();
    const changed: string[] = [];
    const onChanged = (e: { id: string; status: string }) => e.status === 'queued' && changed.push(e.id);
    engine.events.on('execution:changed', onChanged);
    clock.set(due + 200);
    const fired = await tickSchedulesOnce(engine, { concurrency: 3 });
    await new Promise((r) => setTimeout(r, 50)); // local announcements arrive on a microtask
    engine.events.off('execution:changed', onChanged);

    expect(fired).toHaveLength(450);
    const ids = rows.map((r) => r.id);
    const made = await ts.store.db.selectFrom('executions').selectAll().where('schedule_id', 'in', ids).execute();
    expect(made).toHaveLength(450);
    expect(new Set(made.map((e) => e.schedule_id)).size).toBe(450);
    const queued = made.filter((e) => e.status === 'queued');
    const skipped = made.filter((e) => e.status === 'skipped');
    expect(queued).toHaveLength(303);
    expect(skipped.map((e) => [e.agent, e.error_code])).toEqual(Array.from({ length: 147 }, () => [agent, 'backlog_full']));
    // Columns a queued row lacks (completed_at, error_*) are NULL, not borrowed from skipped rows.
    for (const e of queued) expect([e.completed_at, e.error_code, e.error_message]).toEqual([null, null, null]);
    for (const e of skipped) expect(e.completed_at).toBe(due + 200);
    // Each row as the one-at-a-time path would write it.
    const one = made.find((e) => e.schedule_id === rows[1]!.id)!;
    expect(one).toMatchObject({
      agent: roomy,
      trigger_kind: 'schedule',
      message: 'm-1',
      payload: '{"i":1}',
      priority: 1,
      scheduled_for: due,
      serial_key: rows[1]!.id,
      max_redeliveries: 7,
      timeout_seconds: 99,
      attempt: 0,
      queued_at: due + 200,
      changed_by: 'scheduler:sched-test',
    });
    expect(made.find((e) => e.schedule_id === rows[0]!.id)!.serial_key).toBeNull();
    expect(JSON.parse(one.origin)).toEqual({ schedule_id: rows[1]!.id, scheduled_for: new Date(due).toISOString() });
    // The database trigger wrote one creation event per row; each batch has one audit row, and
    // together they count and list every run.
    const events = await ts.store.db
      .selectFrom('execution_events')
      .select(['execution_id', 'from_status', 'to_status'])
      .where(
        'execution_id',
        'in',
        made.map((e) => e.id),
      )
      .execute();
    expect(events).toHaveLength(450);
    expect(events.every((e) => e.from_status === null)).toBe(true);
    const audits = await ts.store.db
      .selectFrom('audit_log')
      .select(['execution_id', 'detail'])
      .where('action', '=', 'schedule.batch')
      .where('at', '=', due + 200)
      .execute();
    const details = audits.map(
      (a) => JSON.parse(a.detail!) as { queued: number; skipped: { backlog_full?: number }; runs: Array<{ execution_id: string }> },
    );
    expect(audits.every((a) => a.execution_id === null)).toBe(true);
    // Three concurrent passes of batches of up to 400: a few batches, each listing ≤ 100 runs.
    expect(audits.length).toBeGreaterThanOrEqual(2);
    expect(audits.length).toBeLessThan(20);
    expect(details.reduce((n, d) => n + d.queued, 0)).toBe(303);
    expect(details.reduce((n, d) => n + (d.skipped.backlog_full ?? 0), 0)).toBe(147);
    const listed = details.flatMap((d) => d.runs.map((r) => r.execution_id));
    expect(new Set(listed).size).toBe(listed.length);
    for (const id of listed) expect(made.some((e) => e.id === id)).toBe(true);
    // Every queued row was announced (in messages carrying many ids).
    expect(changed.sort()).toEqual(queued.map((e) => e.id).sort());
    // All advanced to tomorrow 09:00, once.
    const next = await ts.store.db.selectFrom('schedules').select(['next_run_at', 'last_run_at']).where('id', 'in', ids).execute();
    expect(new Set(next.map((r) => `${r.next_run_at}/${r.last_run_at}`))).toEqual(new Set([`${due + 86_400_000}/${due}`]));
    expect(await tickSchedulesOnce(engine)).toEqual([]);
  });

  it('the loop pass says how soon the next due time comes, so the loop wakes for it', async () => {
    clock.set(Date.UTC(2026, 7, 1, 0, 0, 20));
    expect(await schedulerPass(engine)).toEqual({}); // nothing enabled
    const s = await t().schedules.create(agent, { name: 'soon', cron: '* * * * *', message: 'm', overlap_policy: 'allow' }, 'test');
    expect(await schedulerPass(engine)).toEqual({ nextInMs: 40_000 });
    clock.set(Date.UTC(2026, 7, 1, 0, 1, 0, 5));
    expect(await schedulerPass(engine)).toEqual({ nextInMs: 60_000 - 5 });
    expect(await rowsOf(s.id)).toHaveLength(1);

    // startLoop runs a pass again that soon rather than after its interval (at least 800 ms here).
    const at: number[] = [];
    const loop = startLoop(
      { name: 'test', once: async () => ({ nextInMs: at.push(Date.now()) < 3 ? 5 : undefined }), intervalMs: 1000 },
      engine.events,
    );
    while (at.length < 3) await new Promise((r) => setTimeout(r, 10));
    await loop.stop();
    expect(at[2]! - at[0]!).toBeLessThan(800);
  });

  it('a stopping process ends the pass after the round of batches in hand; what is still due stays due', async () => {
    clock.set(Date.UTC(2026, 8, 1, 0, 0, 20));
    const roomy = `${agent}-roomy`;
    await engine.agents.create({ name: roomy, max_backlog: 100 }, 'test');
    const made: Array<{ id: string }> = [];
    for (let i = 0; i < 10; i++)
      made.push(await t().schedules.create(roomy, { name: `due-${i}`, cron: '* * * * *', message: 'm', overlap_policy: 'allow' }, 'test'));
    clock.set(Date.UTC(2026, 8, 1, 0, 1, 0, 5));
    const stopping = new AbortController();
    stopping.abort();
    expect(await tickSchedulesOnce(engine, { batch: 2, concurrency: 1, stopping: stopping.signal })).toHaveLength(2);
    const fired = async () => (await Promise.all(made.map((s) => rowsOf(s.id)))).filter((r) => r.length > 0).length;
    expect(await fired()).toBe(2);
    // The next pass (this process's next start, or another process) fires the rest, once each.
    expect(await tickSchedulesOnce(engine, { batch: 2, concurrency: 1 })).toHaveLength(8);
    expect(await fired()).toBe(10);
  });

  it('compiled expressions and next due times are reused, with the same answers as croner', () => {
    expect(compileCron('*/5 * * * *', 'Europe/Berlin')).toBe(compileCron('*/5 * * * *', 'Europe/Berlin'));
    const exprs = ['* * * * *', '*/7 * * * *', '0 9 * * 1-5', '30 2 * * *', '0 0 1 1 *', '*/10 * * * * *'];
    const zones = ['UTC', 'America/New_York', 'Europe/Berlin', 'Asia/Kolkata'];
    fc.assert(
      fc.property(
        fc.constantFrom(...exprs),
        fc.constantFrom(...zones),
        fc.integer({ min: Date.UTC(2026, 0, 1), max: Date.UTC(2027, 0, 1) }),
        (expr, tz, at) => {
          const want = new Cron(expr, { timezone: tz, paused: true, mode: '5-or-6-parts' }).nextRun(new Date(at))?.getTime() ?? null;
          const c = compileCron(expr, tz);
          expect(nextAfter(c, at)).toBe(want);
          expect(nextAfter(c, at)).toBe(want); // a second answer comes from the memo
        },
      ),
      { numRuns: 300 },
    );
  });
});
