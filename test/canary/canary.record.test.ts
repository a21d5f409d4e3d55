import { createServer, type Server } from 'node:http';
import { spawn } from 'node:child_process';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../../src/api/server.ts';
import { KeyStore } from '../../src/auth/keys.ts';
import { ALERT_DELIVERY, type AlertSink } from '../../src/canary/alerts.ts';
import { Canary, STALE_AFTER_INTERVALS } from '../../src/canary/service.ts';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { writeRow } from '../helpers/canary.ts';
import { BATON_BIN } from '../helpers/process.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';

// How violations are stored (one open row per invariant and subject), alerted (transitions
// only, retried, visible when undeliverable), reported (status, API, CLI) and how the timer is
// shared between processes. Its own store: alerts are per invariant, so this file must start green.

let ts: TestStore;
let engine: Engine;
let app: FastifyInstance;
let admin: string;
const clock = manualClock();
const INTERVAL = 60_000;

/** A real HTTP sink that records what it receives and answers with `status`. */
let sink: Server;
let sinkUrl = '';
let sinkStatus = 200;
const received: Array<{ path: string; body: any }> = [];
let sinks: AlertSink[];
let canary: Canary;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'record-test' });
  sink = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      received.push({ path: req.url!, body: JSON.parse(body) });
      res.writeHead(sinkStatus).end();
    });
  });
  await new Promise<void>((r) => sink.listen(0, '127.0.0.1', r));
  sinkUrl = `http://127.0.0.1:${(sink.address() as any).port}`;
  sinks = [
    { kind: 'webhook', url: `${sinkUrl}/hook` },
    { kind: 'slack', url: `${sinkUrl}/slack` },
  ];
  canary = new Canary({ store: ts.store, nodeId: 'node-a', clock, intervalMs: INTERVAL, sinks });
  const keys = new KeyStore(ts.store);
  app = await buildServer({ engine, keys, logger: false, canary });
  admin = (await keys.create({ name: 'admin', scope: 'admin' }, 'test')).key;
});
afterAll(async () => {
  await app.close();
  engine.close();
  await new Promise((r) => sink.close(r));
  await ts.cleanup();
});

const api = async (method: 'GET' | 'POST', url: string) => {
  const r = await app.inject({ method, url, headers: { authorization: `Bearer ${admin}` } });
  return { status: r.statusCode, body: r.body ? JSON.parse(r.body) : null, text: r.body };
};

async function openRows(invariant: string) {
  return ts.store.db
    .selectFrom('canary_violations')
    .selectAll()
    .where('invariant', '=', invariant)
    .where('resolved_at', 'is', null)
    .execute();
}

describe('recording and alerting', () => {
  const token = 'xoxb-1234567890-' + 'abcdefghij'.repeat(2);
  let agent = '';
  let leaky = '';

  it('a green fleet stores nothing and alerts nothing', async () => {
    agent = (await engine.agents.create({ name: 'rec-1' }, 'test')).name;
    const r = await canary.runOnce();
    expect(r.ok).toBe(true);
    expect(r.open).toBe(0);
    expect(r.transitions).toEqual([]);
    expect(received).toEqual([]);
    expect((await api('GET', '/v1/canary')).body.status).toBe('healthy');
  });

  it('green → red: one open row per invariant and subject, one alert per sink, ids and codes only', async () => {
    leaky = (await engine.submit(agent, { message: 'x', payload: { slack: token } }, 'test')).id;
    const first = await canary.runOnce();
    expect(first.transitions).toEqual([{ invariant: 'G-04', transition: 'violated' }]);
    clock.advance(10_000);
    const second = await canary.runOnce();
    expect(second.transitions).toEqual([]);
    const rows = await openRows('G-04');
    expect(rows).toHaveLength(1);
    expect(rows[0]!.subject).toBe(leaky);
    expect(Number(rows[0]!.last_seen) - Number(rows[0]!.first_seen)).toBe(10_000);
    // Delivered by runOnce (transitions deliver at once); exactly one per sink.
    expect(received.map((x) => x.path).sort()).toEqual(['/hook', '/slack']);
    const hook = received.find((x) => x.path === '/hook')!.body;
    expect(hook).toMatchObject({
      event: 'canary.violated',
      invariant: 'G-04',
      severity: 'critical',
      subjects: [leaky],
      reasons: ['secret_in_payload'],
    });
    expect(hook.diagnosis).toMatch(/credential/);
    expect(received.find((x) => x.path === '/slack')!.body.text).toMatch(/G-04 violated/);
    expect(JSON.stringify(received)).not.toContain(token);
    const status = await api('GET', '/v1/canary');
    expect(status.body.status).toBe('violated');
    expect(status.body.open.map((v: any) => [v.invariant, v.subject])).toEqual([['G-04', leaky]]);
    expect(status.text).not.toContain(token);
  });

  it('red → green resolves the row and alerts once; a recurrence opens a new row', async () => {
    received.length = 0;
    await ts.store.db.updateTable('executions').set({ payload: '{"slack":"[redacted]"}' }).where('id', '=', leaky).execute();
    const r = await canary.runOnce();
    expect(r.transitions).toEqual([{ invariant: 'G-04', transition: 'resolved' }]);
    expect(await openRows('G-04')).toHaveLength(0);
    expect(received.map((x) => x.body.event ?? 'slack').sort()).toEqual(['canary.resolved', 'slack']);
    expect((await canary.runOnce()).transitions).toEqual([]);
    const again = (await engine.submit(agent, { message: 'y', payload: { k: token } }, 'test')).id;
    await canary.runOnce();
    const all = await ts.store.db
      .selectFrom('canary_violations')
      .select(['subject', 'resolved_at'])
      .where('invariant', '=', 'G-04')
      .orderBy('id')
      .execute();
    expect(all.map((v) => [v.subject, v.resolved_at === null])).toEqual([
      [leaky, false],
      [again, true],
    ]);
    await ts.store.db.updateTable('executions').set({ payload: 'null' }).where('id', '=', again).execute();
    await canary.runOnce();
  });

  it('an undeliverable alert is retried with backoff, then marked failed and shown', async () => {
    sinkStatus = 500;
    received.length = 0;
    const bad = await writeRow(ts.store, clock(), { agent, status: 'failed' }); // E-03
    await canary.runOnce();
    let pending = await ts.store.db.selectFrom('canary_alerts').selectAll().where('invariant', '=', 'E-03').execute();
    expect(pending.map((a) => [a.sink, a.status, Number(a.attempts), a.last_error])).toEqual([
      ['webhook', 'pending', 1, 'http_500'],
      ['slack', 'pending', 1, 'http_500'],
    ]);
    expect(Number(pending[0]!.next_attempt_at)).toBeGreaterThan(clock() + ALERT_DELIVERY.firstBackoffMs * 0.79);
    // Not due yet: nothing is sent.
    expect(await canary.deliverAlerts()).toEqual([]);
    for (let i = 1; i < ALERT_DELIVERY.maxAttempts; i++) {
      clock.advance(ALERT_DELIVERY.maxBackoffMs * 1.3);
      await canary.deliverAlerts();
    }
    pending = await ts.store.db.selectFrom('canary_alerts').selectAll().where('invariant', '=', 'E-03').execute();
    expect(pending.map((a) => [a.status, Number(a.attempts)])).toEqual([
      ['failed', ALERT_DELIVERY.maxAttempts],
      ['failed', ALERT_DELIVERY.maxAttempts],
    ]);
    expect(received.length).toBe(2 * ALERT_DELIVERY.maxAttempts);
    const status = await api('GET', '/v1/canary');
    expect(status.body.alerts.failed).toBe(2);
    expect(status.body.failed_alerts.map((a: any) => [a.invariant, a.sink, a.last_error])).toEqual([
      ['E-03', 'slack', 'http_500'],
      ['E-03', 'webhook', 'http_500'],
    ]);
    expect(status.text).not.toContain(sinkUrl);
    sinkStatus = 200;
    await ts.store.db.updateTable('executions').set({ completed_at: clock() }).where('id', '=', bad.id).execute();
    await canary.runOnce();
  });
});

describe('status', () => {
  it('is stale when no cycle completed within three intervals, and disabled without a timer', async () => {
    await canary.runOnce();
    expect((await canary.status()).status).toBe('healthy');
    clock.advance(STALE_AFTER_INTERVALS * INTERVAL + 1);
    expect((await canary.status()).status).toBe('stale');
    const off = new Canary({ store: ts.store, nodeId: 'node-off', clock, intervalMs: 0 });
    expect((await off.status()).status).toBe('disabled');
    // A fresh cycle by another process is reported even where the timer is off.
    await canary.runOnce();
    expect((await off.status()).status).toBe('healthy');
  });

  it('lists violation history with filters, newest first, and refuses bad filters', async () => {
    const a = (await engine.agents.create({ name: 'rec-2' }, 'test')).name;
    const row = await writeRow(ts.store, clock(), { agent: a, status: 'succeeded', started_at: clock(), completed_at: clock() }); // E-03 ran_without_duration
    await canary.runOnce();
    const open = await api('GET', `/v1/canary/violations?invariant=E-03&agent=${a}`);
    expect(open.status).toBe(200);
    expect(open.body.violations.map((v: any) => [v.subject, v.reason, v.resolved_at])).toEqual([[row.id, 'ran_without_duration', null]]);
    await ts.store.db.updateTable('executions').set({ duration_ms: 0 }).where('id', '=', row.id).execute();
    await canary.runOnce();
    expect((await api('GET', `/v1/canary/violations?invariant=E-03&agent=${a}`)).body.violations).toEqual([]);
    const hist = await api('GET', `/v1/canary/violations?invariant=E-03&state=all&limit=1`);
    expect(hist.body.violations).toHaveLength(1);
    expect(hist.body.violations[0].subject).toBe(row.id);
    expect(hist.body.next_before).toBe(hist.body.violations[0].id);
    const bad = await api('GET', '/v1/canary/violations?invariant=nope');
    expect(bad.status).toBe(400);
    expect(bad.body.error).toBe('validation_error');
    expect((await app.inject({ method: 'GET', url: '/v1/canary' })).statusCode).toBe(401);
  });
});

describe('the timer runs in one process at a time', () => {
  it('the lease goes to one node, and to another only after it lapsed or was handed on', async () => {
    const b = new Canary({ store: ts.store, nodeId: 'node-b', clock, intervalMs: INTERVAL, sinks });
    await ts.store.db.updateTable('canary_state').set({ lease_owner: null, lease_expires_at: null }).execute();
    expect(await canary.acquireLease()).toBe(true);
    expect(await b.acquireLease()).toBe(false);
    expect(await b.tick()).toBeUndefined();
    expect(await canary.tick()).toBeDefined();
    clock.advance(1.5 * INTERVAL + 1);
    expect(await b.acquireLease()).toBe(true);
    expect(await canary.acquireLease()).toBe(false);
    await b.releaseLease(); // hands the lease on
    expect(await canary.acquireLease()).toBe(true);
  });
});

describe('metrics and the CLI', () => {
  it('GET /metrics exposes executions, seats, canary, reaper, HTTP and process metrics', async () => {
    const a = (await engine.agents.create({ name: 'rec-m', max_parallel: 2 }, 'test')).name;
    await engine.submit(a, { message: 'm' }, 'test');
    await engine.submit(a, { message: 'm' }, 'test');
    const [row] = await engine.claim(a, { owner: 'w' });
    clock.advance(1_500);
    await engine.complete(row!.id, row!.lease_token!, { status: 'succeeded' }, 'w');
    await writeRow(ts.store, clock(), { agent: a, status: 'failed' }); // E-03, open
    await canary.runOnce();
    // A crashed worker's lease, handed back by the reaper of this process.
    await writeRow(ts.store, clock(), {
      agent: a,
      status: 'running',
      attempt: 1,
      lease_owner: 'w-dead',
      lease_token: 'ls_dead',
      lease_expires_at: clock() - 1,
      started_at: clock() - 10,
      deadline_at: clock() + 60_000,
    });
    expect((await engine.reapOnce()).map((x) => x.kind)).toEqual(['requeued']);
    expect((await api('GET', '/v1/canary')).status).toBe(200);
    const r = await app.inject({ method: 'GET', url: '/metrics' });
    expect(r.statusCode).toBe(200);
    const text = r.body;
    expect(text).toContain(`baton_executions{agent="${a}",status="queued"} 2`);
    expect(text).toContain(`baton_agent_queued{agent="${a}"} 2`);
    expect(text).toContain(`baton_agent_max_parallel{agent="${a}"} 2`);
    expect(text).toContain(`baton_run_duration_seconds_count{agent="${a}",status="succeeded"} 1`);
    expect(text).toContain(`baton_admission_wait_seconds_count{agent="${a}"} 1`);
    expect(text).toMatch(/baton_canary_violations_open\{invariant="E-03",severity="warning"\} 1/);
    expect(text).toMatch(/baton_http_request_duration_seconds_count\{method="GET",route="\/v1\/canary",status_code="200"\} \d+/);
    expect(text).toContain('baton_reaper_actions_total{kind="requeued"} 1');
    expect(text).toContain('process_cpu_user_seconds_total');
    expect(text).toContain('baton_store_up 1');
  });

  it('`baton canary run` exits non-zero while violated, and `status --json` reports it', async () => {
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    const run = (args: string[]) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const p = spawn(process.execPath, [BATON_BIN, '--server', url, '--key', admin, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        p.stdout.on('data', (d) => (out += d));
        p.stderr.on('data', (d) => (out += d));
        p.on('exit', (code) => resolve({ code, out }));
      });
    const red = await run(['canary', 'run']);
    expect(red.out).toContain('VIOLATED');
    expect(red.out).toContain('E-03');
    expect(red.code).toBe(1);
    const st = await run(['--json', 'canary', 'status']);
    expect(st.code).toBe(0);
    expect(JSON.parse(st.out).status).toBe('violated');
    await ts.store.db
      .updateTable('executions')
      .set({ completed_at: clock() })
      .where('status', '=', 'failed')
      .where('completed_at', 'is', null)
      .execute();
    const green = await run(['canary', 'run']);
    expect(green.out).toContain('all invariants hold');
    expect(green.code).toBe(0);
    const full = await run(['canary', 'run', '--full']);
    expect(full.out).toMatch(/full check: \d+ event\(s\) read/);
    expect(full.out).toContain('all invariants hold');
    expect(full.code).toBe(0);
  });

  it('POST /v1/canary/run takes `full` as a query parameter or in the body', async () => {
    const plain = await api('POST', '/v1/canary/run');
    expect(plain.status).toBe(200);
    expect(plain.body).toMatchObject({ full: false, events: { caught_up: true } });
    const byQuery = await api('POST', '/v1/canary/run?full=true');
    expect(byQuery.body).toMatchObject({ full: true, events: { after: 0, caught_up: true } });
    expect(byQuery.body.events.read).toBeGreaterThan(0);
    const byBody = await app.inject({
      method: 'POST',
      url: '/v1/canary/run',
      headers: { authorization: `Bearer ${admin}` },
      payload: { full: true },
    });
    expect(byBody.statusCode).toBe(200);
    expect(JSON.parse(byBody.body).full).toBe(true);
    const bad = await api('POST', '/v1/canary/run?full=maybe');
    expect(bad.status).toBe(400);
    expect(bad.body.error).toBe('validation_error');
  });
});
