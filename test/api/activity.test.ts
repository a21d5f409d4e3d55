import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../../src/api/server.ts';
import { KeyStore } from '../../src/auth/keys.ts';
import { assignSeats, bucketSeries, percentile, SERIES_ROW_CAP } from '../../src/domain/activity.ts';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const MIN = 60_000;
const clock = manualClock(Date.UTC(2026, 0, 1, 12, 0));
const t0 = clock();
let ts: TestStore;
let engine: Engine;
let app: FastifyInstance;
let admin: string;

async function get(url: string, key = admin) {
  const res = await app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${key}` } });
  return { status: res.statusCode, body: JSON.parse(res.body) };
}

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'activity-test', clock });
  const keys = new KeyStore(ts.store);
  app = await buildServer({ engine, keys, logger: false });
  admin = (await keys.create({ name: 'admin', scope: 'admin' }, 'test')).key;
});
afterAll(async () => {
  await app?.close();
  engine?.close();
  await ts?.cleanup();
});

describe('activity math', () => {
  it('takes nearest-rank percentiles', () => {
    expect(percentile([], 50)).toBeNull();
    expect(percentile([7], 95)).toBe(7);
    const hundred = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(hundred, 50)).toBe(50);
    expect(percentile(hundred, 95)).toBe(95);
  });

  it('gives each run the lowest seat free when it started, handing a seat straight on', () => {
    const seats = assignSeats(
      [
        { id: 'a', started_at: 0, ended_at: 10 },
        { id: 'b', started_at: 5, ended_at: 20 },
        { id: 'c', started_at: 10, ended_at: 15 }, // starts as a ends: a's seat
        { id: 'd', started_at: 12, ended_at: null }, // c holds seat 0 and b seat 1: a third
      ],
      100,
    );
    expect(Object.fromEntries(seats)).toEqual({ a: 0, b: 1, c: 0, d: 2 });
  });

  it('counts a spike shorter than a bucket in that bucket, and ends before starts at one instant', () => {
    const rows = [
      { status: 'succeeded', duration_ms: 10, queued_at: 0, started_at: 1000, completed_at: 1010 },
      { status: 'succeeded', duration_ms: 30, queued_at: 1010, started_at: 1010, completed_at: 1040 },
    ];
    const b = bucketSeries(rows, 0, 60_000, 120_000);
    expect(b).toHaveLength(60);
    expect(b[0]).toMatchObject({ succeeded: 2, failed: 0, p50_ms: 10, p95_ms: 30, queued_max: 1, running_max: 1 });
    expect(b[1]).toMatchObject({ succeeded: 0, p50_ms: null, queued_max: 0, running_max: 0 });
  });
});

describe(`GET /v1/agents/{agent}/series and /seats over a real run (${STORE_KIND})`, () => {
  it('shows completions, failures, durations, queue depth and the seats held, within the cap', async () => {
    await engine.agents.create({ name: 'charts', max_parallel: 2, max_backlog: 100 }, 'test');
    await engine.agents.create({ name: 'other' }, 'test');
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await engine.submit('charts', { message: `task ${i}` }, 'test')).id);

    clock.advance(MIN); // 12:01: two admitted, three wait
    const first = await engine.claim('charts', { owner: 'w1', max: 5 });
    expect(first).toHaveLength(2);
    clock.advance(2 * MIN); // 12:03
    await engine.complete(first[0]!.id, first[0]!.lease_token!, { status: 'succeeded', result: null }, 'w1');
    clock.advance(MIN); // 12:04
    await engine.complete(first[1]!.id, first[1]!.lease_token!, { status: 'failed', error: { code: 'x', message: 'y' } }, 'w1');
    const second = await engine.claim('charts', { owner: 'w2', max: 5 });
    expect(second).toHaveLength(2);
    clock.advance(MIN); // 12:05
    await engine.complete(second[0]!.id, second[0]!.lease_token!, { status: 'succeeded', result: null }, 'w2');
    clock.advance(5 * MIN); // 12:10: second[1] still running, one queued

    const s = await get('/v1/agents/charts/series?window=1h');
    expect(s.status).toBe(200);
    expect(s.body).toMatchObject({ agent: 'charts', window: '1h', bucket_ms: MIN, max_parallel: 2, complete_from: null });
    expect(s.body.to).toBe(new Date(clock()).toISOString());
    const buckets = s.body.buckets as Array<Record<string, any>>;
    expect(buckets).toHaveLength(60);
    const at = (ms: number) => buckets.find((b) => b.start === new Date(ms).toISOString())!;
    // The window ends now (12:10), so buckets start at 11:10, 11:11, …: one a minute.
    expect(at(t0 + 3 * MIN)).toMatchObject({ succeeded: 1, failed: 0, p50_ms: 2 * MIN, running_max: 2, queued_max: 3 });
    expect(at(t0 + 4 * MIN)).toMatchObject({ succeeded: 0, failed: 1, p50_ms: 3 * MIN, p95_ms: 3 * MIN });
    expect(at(t0 + 5 * MIN)).toMatchObject({ succeeded: 1, p50_ms: MIN });
    expect(at(t0 + 9 * MIN)).toMatchObject({ running_max: 1, queued_max: 1 });
    expect(at(t0 - 10 * MIN)).toMatchObject({ succeeded: 0, failed: 0, queued_max: 0, running_max: 0 });
    expect(buckets.reduce((n, b) => n + b.succeeded + b.failed, 0)).toBe(3);
    expect(Math.max(...buckets.map((b) => b.running_max))).toBe(2); // the cap held

    const seats = await get('/v1/agents/charts/seats');
    expect(seats.status).toBe(200);
    expect(seats.body).toMatchObject({ window: '1h', max_parallel: 2, seats_used: 2, truncated: false });
    const byId = Object.fromEntries((seats.body.intervals as Array<Record<string, any>>).map((r) => [r.execution_id, r]));
    expect(Object.keys(byId).sort()).toEqual([...first, ...second].map((e) => e.id).sort());
    expect(byId[first[0]!.id]).toMatchObject({
      seat: 0,
      status: 'succeeded',
      owner: 'w1',
      attempt: 1,
      queued_at: new Date(t0).toISOString(),
      started_at: new Date(t0 + MIN).toISOString(),
      ended_at: new Date(t0 + 3 * MIN).toISOString(),
    });
    expect(byId[second[1]!.id]).toMatchObject({ status: 'running', ended_at: null, owner: 'w2' });
    expect(byId[second[0]!.id].seat).not.toBe(byId[second[1]!.id].seat);
    const waitingIds = ids.filter((id) => !byId[id]);
    expect(seats.body.waiting.map((w: { execution_id: string }) => w.execution_id)).toEqual(waitingIds);

    // A day's window: the same runs, in 24-minute buckets.
    const day = await get('/v1/agents/charts/series?window=24h');
    expect(day.body.bucket_ms).toBe(24 * MIN);
    expect(day.body.buckets.reduce((n: number, b: { succeeded: number }) => n + b.succeeded, 0)).toBe(2);
  });

  it('refuses bad input with a code naming the field, an unknown agent, and another agent’s key', async () => {
    const bad = await get('/v1/agents/charts/series?window=2h');
    expect(bad.status).toBe(400);
    expect(bad.body.error).toBe('validation_error');
    expect(bad.body.message).toMatch(/window/);
    expect((await get('/v1/agents/charts/seats?since=1')).status).toBe(400);
    expect((await get('/v1/agents/nobody/series')).body.error).toBe('not_found');
    expect((await get('/v1/agents/nobody/seats')).status).toBe(404);
    const keys = new KeyStore(ts.store);
    const scoped = (await keys.create({ name: 'other-only', scope: 'agent', agent: 'other' }, 'test')).key;
    expect((await get('/v1/agents/charts/series', scoped)).status).toBe(403);
    expect((await get('/v1/agents/other/seats', scoped)).status).toBe(200);
  });
});

describe(`POST /v1/executions/{id}/retry: the dashboard's bulk retry, one item at a time (${STORE_KIND})`, () => {
  async function post(url: string) {
    const res = await app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${admin}` } });
    return { status: res.statusCode, body: JSON.parse(res.body) };
  }

  it('retries a failed run once, says what stopped any other, and keeps the backlog', async () => {
    await engine.agents.create({ name: 'retries', max_parallel: 2, max_backlog: 1 }, 'test');
    const a = await engine.submit('retries', { message: 'again', payload: { n: 1 }, priority: 3 }, 'test');
    const [claimed] = await engine.claim('retries', { owner: 'w' });
    await engine.complete(claimed!.id, claimed!.lease_token!, { status: 'failed', error: { code: 'boom', message: 'no' } }, 'w');
    const ok = await engine.submit('retries', { message: 'fine' }, 'test');

    // Not failed (queued): refused, nothing created.
    const notFailed = await post(`/v1/executions/${ok.id}/retry`);
    expect(notFailed).toMatchObject({ status: 409, body: { error: 'invalid_transition', status: 'queued' } });
    // The backlog (1) is full with `ok` queued: refused.
    expect(await post(`/v1/executions/${a.id}/retry`)).toMatchObject({ status: 429, body: { error: 'backlog_full' } });
    await engine.cancel(ok.id, 'test');

    const retried = await post(`/v1/executions/${a.id}/retry`);
    expect(retried.status).toBe(201);
    expect(retried.body).toMatchObject({ agent: 'retries', status: 'queued', trigger: 'retry', retry_of: a.id, message: 'again' });
    expect(retried.body.payload).toEqual({ n: 1 });
    const again = await post(`/v1/executions/${a.id}/retry`);
    expect(again).toMatchObject({ status: 409, body: { error: 'already_exists', execution_id: retried.body.id } });
    expect((await engine.getExecution(a.id)).chain).toEqual([a.id, retried.body.id]);
    expect((await post('/v1/executions/ex_nope/retry')).body.error).toBe('not_found');
  });
});

describe(`an agent busier than the series' row cap (${STORE_KIND})`, () => {
  it('still counts every finished run exactly, and says from when durations and queue are drawn', async () => {
    await engine.agents.create({ name: 'busy' }, 'test');
    const now = clock();
    const n = SERIES_ROW_CAP + 100;
    // One finished run every 0.6 s over the last hour, every tenth failed.
    const rows = Array.from({ length: n }, (_, i) => {
      const done = now - 1000 - Math.floor((i * 3_590_000) / n);
      return {
        id: `ex_busy_${String(i).padStart(6, '0')}`,
        agent: 'busy',
        trigger_kind: 'api' as const,
        origin: '{}',
        message: 'm',
        payload: 'null',
        priority: 0,
        status: i % 10 === 0 ? ('failed' as const) : ('succeeded' as const),
        attempt: 1,
        max_redeliveries: 3,
        timeout_seconds: 600,
        lease_ttl_seconds: 30,
        lease_owner: 'w',
        lease_token: 't',
        created_at: done - 500,
        queued_at: done - 500,
        started_at: done - 400,
        completed_at: done,
        duration_ms: 400,
        changed_at: done,
        changed_by: 'seed',
      };
    });
    for (let i = 0; i < n; i += 1000)
      await ts.store.transaction((tx) => ts.store.insertMany(tx, 'executions', rows.slice(i, i + 1000) as never));
    const s = await get('/v1/agents/busy/series?window=1h');
    expect(s.status).toBe(200);
    const sum = (k: string) => s.body.buckets.reduce((t: number, b: Record<string, number>) => t + b[k]!, 0);
    expect({ succeeded: sum('succeeded'), failed: sum('failed'), other: sum('other') }).toEqual({
      succeeded: n - Math.ceil(n / 10),
      failed: Math.ceil(n / 10),
      other: 0,
    });
    // The newest SERIES_ROW_CAP runs were read row by row: durations start where they do.
    expect(s.body.complete_from).toBe(new Date(rows[SERIES_ROW_CAP - 1]!.completed_at).toISOString());
    const last = s.body.buckets[59];
    expect(last).toMatchObject({ p50_ms: 400, p95_ms: 400, running_max: 1 });
  });
});
