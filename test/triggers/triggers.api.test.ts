import type { FastifyInstance, InjectOptions } from 'fastify';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../../src/api/server.ts';
import { BatonClient } from '../../src/client.ts';
import { PREVIEW_CHARS, CONFIG_PAGE } from '../../src/domain/lists.ts';
import { KeyStore } from '../../src/auth/keys.ts';
import { Engine } from '../../src/engine/engine.ts';
import { fingerprint } from '../../src/engine/triggers/idempotency.ts';
import { sign, WEBHOOK_BODY_LIMIT } from '../../src/engine/triggers/webhooks.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { agentMakerOverApi } from '../helpers/agents.ts';

let ts: TestStore;
let engine: Engine;
let app: FastifyInstance;
let admin: string;
let n = 0;

interface Answer {
  status: number;
  body: any;
  headers: Record<string, unknown>;
}
async function call(
  method: InjectOptions['method'],
  url: string,
  opts: { body?: unknown; raw?: string | Buffer; key?: string | null; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key !== null) headers.authorization ??= `Bearer ${opts.key ?? admin}`;
  if (opts.raw !== undefined) headers['content-type'] ??= 'application/json';
  const payload = opts.raw ?? (opts.body === undefined ? undefined : (opts.body as any));
  const res = await app.inject({ method, url, headers, ...(payload === undefined ? {} : { payload }) });
  return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : null, headers: res.headers };
}
const post = (url: string, body?: unknown, headers?: Record<string, string>) => call('POST', url, { body, headers });
const hook = (path: string, raw: string | Buffer, headers: Record<string, string> = {}) => call('POST', path, { raw, key: null, headers });

/** fetch over app.inject, for a BatonClient talking to this test's server. */
const injectFetch = (async (input: string | URL, init: RequestInit = {}) => {
  const url = new URL(String(input));
  const res = await app.inject({
    method: (init.method ?? 'GET') as InjectOptions['method'],
    url: url.pathname + url.search,
    headers: init.headers as Record<string, string>,
    ...(init.body === undefined || init.body === null ? {} : { payload: init.body as string }),
  });
  return new Response(res.body || null, { status: res.statusCode, headers: res.headers as Record<string, string> });
}) as typeof fetch;

function refused(a: Answer, status: number, error: string): any {
  expect({ status: a.status, error: a.body?.error }).toEqual({ status, error });
  expect(a.body.message.length).toBeGreaterThan(0);
  return a.body;
}
const newAgent = agentMakerOverApi(
  (url, body) => post(url, body),
  () => `agent-${++n}`,
);
async function newSchedule(agent: string, body: Record<string, unknown> = {}): Promise<any> {
  const r = await post(`/v1/agents/${agent}/schedules`, {
    name: `s${++n}`,
    cron: '0 0 1 1 *',
    message: 'scheduled work',
    payload: { from: 'schedule' },
    ...body,
  });
  expect(r.status).toBe(201);
  return r.body;
}
const countRows = async (where: { schedule_id?: string; agent?: string; webhook_id?: string }) => {
  let q = ts.store.db.selectFrom('executions').select((eb) => eb.fn.countAll<number>().as('n'));
  if (where.schedule_id) q = q.where('schedule_id', '=', where.schedule_id);
  if (where.agent) q = q.where('agent', '=', where.agent);
  if (where.webhook_id) q = q.where('webhook_id', '=', where.webhook_id);
  return Number((await q.executeTakeFirstOrThrow()).n);
};

beforeAll(async () => {
  ts = await openTestStore({ poolMax: 12 });
  engine = new Engine({ store: ts.store, nodeId: 'api-test' });
  const keys = new KeyStore(ts.store);
  admin = (await keys.create({ name: 'admin', scope: 'admin' }, 'test')).key;
  app = await buildServer({ engine, keys, logger: false });
});
afterAll(async () => {
  await app.close();
  engine.close();
  await ts.cleanup();
});

describe('schedules over HTTP', () => {
  it('creates, lists, shows (with next runs), updates and refuses bad input with 400 naming the field', async () => {
    const agent = await newAgent();
    const s = await newSchedule(agent, { cron: '*/15 * * * *', timezone: 'Europe/Berlin' });
    expect(s).toMatchObject({
      agent,
      enabled: true,
      overlap_policy: 'skip',
      misfire_policy: 'run_once',
      misfire_grace_seconds: 3600,
      timezone: 'Europe/Berlin',
      payload: { from: 'schedule' },
    });
    expect(s.next_runs).toHaveLength(5);
    expect(s.next_run_at).toBe(s.next_runs[0]);
    expect(Date.parse(s.next_runs[1]) - Date.parse(s.next_runs[0])).toBe(15 * 60_000);
    expect((await call('GET', `/v1/schedules/${s.id}`)).body.id).toBe(s.id);
    expect((await call('GET', `/v1/agents/${agent}/schedules`)).body.schedules.map((x: any) => x.id)).toEqual([s.id]);
    const off = await call('PATCH', `/v1/schedules/${s.id}`, { body: { enabled: false } });
    expect(off.body).toMatchObject({ enabled: false, next_run_at: null, next_runs: [] });
    expect(
      refused(await post(`/v1/agents/${agent}/schedules`, { name: 'x', cron: 'every day', message: 'm' }), 400, 'validation_error').message,
    ).toMatch(/body\.cron/);
    expect(
      refused(
        await post(`/v1/agents/${agent}/schedules`, { name: 'x', cron: '* * * * *', timezone: 'Nowhere/City', message: 'm' }),
        400,
        'validation_error',
      ).message,
    ).toMatch(/body\.timezone/);
    expect(
      refused(
        await post(`/v1/agents/${agent}/schedules`, { name: 'x', cron: '* * * * *', message: 'm', overlap_policy: 'never' }),
        400,
        'validation_error',
      ).message,
    ).toMatch(/overlap_policy/);
    refused(await call('PATCH', `/v1/schedules/${s.id}`, { body: { cron: '* * *' } }), 400, 'validation_error');
    refused(await post('/v1/agents/nobody/schedules', { name: 'x', cron: '* * * * *', message: 'm' }), 404, 'not_found');
    refused(await post(`/v1/agents/${agent}/schedules`, { name: s.name, cron: '* * * * *', message: 'm' }), 409, 'already_exists');
  });

  it('manual trigger: 201 with a real id; 409 already_running naming the run (nothing created); 404 first; 429 backlog_full', async () => {
    const agent = await newAgent({ max_backlog: 2 });
    refused(await post('/v1/schedules/sc_nope/trigger'), 404, 'not_found');
    const s = await newSchedule(agent);
    const first = await post(`/v1/schedules/${s.id}/trigger`);
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ status: 'queued', schedule_id: s.id, agent });
    const read = await call('GET', `/v1/executions/${first.body.execution_id}`);
    expect(read.body).toMatchObject({ trigger: 'manual', schedule_id: s.id, message: 'scheduled work', payload: { from: 'schedule' } });
    expect(read.body.origin).toMatchObject({ schedule_id: s.id });
    expect(typeof read.body.origin.key_id).toBe('string');

    const busy = refused(await post(`/v1/schedules/${s.id}/trigger`), 409, 'already_running');
    expect(busy.execution_id).toBe(first.body.execution_id);
    expect(await countRows({ schedule_id: s.id })).toBe(1);
    const audit = await ts.store.db.selectFrom('audit_log').selectAll().where('subject', '=', s.id).orderBy('id').execute();
    expect(audit.map((a) => [a.action, a.execution_id])).toEqual([
      ['schedule.create', null],
      ['schedule.trigger', first.body.execution_id],
      ['schedule.trigger.refused', first.body.execution_id],
    ]);

    const q = await newSchedule(agent, { overlap_policy: 'queue' });
    expect((await post(`/v1/schedules/${q.id}/trigger`, { payload: { override: true } })).status).toBe(201);
    refused(await post(`/v1/schedules/${q.id}/trigger`), 429, 'backlog_full');
    expect(await countRows({ agent })).toBe(2);
  });

  it('Idempotency-Key on trigger: the first answer again with Idempotent-Replay; another request with the key is 422', async () => {
    const agent = await newAgent();
    const s = await newSchedule(agent, { overlap_policy: 'allow' });
    const a = await post(`/v1/schedules/${s.id}/trigger`, undefined, { 'idempotency-key': 'trig-1' });
    expect(a.status).toBe(201);
    expect(a.headers['idempotent-replay']).toBeUndefined();
    const b = await post(`/v1/schedules/${s.id}/trigger`, undefined, { 'idempotency-key': 'trig-1' });
    expect(b.status).toBe(201);
    expect(b.headers['idempotent-replay']).toBe('true');
    expect(b.body).toEqual(a.body);
    refused(await post(`/v1/schedules/${s.id}/trigger`, { payload: 1 }, { 'idempotency-key': 'trig-1' }), 422, 'idempotency_key_reused');
    expect(await countRows({ schedule_id: s.id })).toBe(1);
    refused(await post(`/v1/schedules/${s.id}/trigger`, undefined, { 'idempotency-key': 'bad key with spaces' }), 400, 'validation_error');
  });
});

describe('idempotent task submission', () => {
  it('ten concurrent requests with one key create one execution, and every caller gets its id', async () => {
    const agent = await newAgent({ max_backlog: 50 });
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => post(`/v1/agents/${agent}/executions`, { message: 'once' }, { 'idempotency-key': 'k-concurrent' })),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(10).fill(201));
    const ids = new Set(answers.map((a) => a.body.execution_id));
    expect(ids.size).toBe(1);
    expect(answers.filter((a) => a.headers['idempotent-replay'] === 'true')).toHaveLength(9);
    const rows = await ts.store.db.selectFrom('executions').select(['id', 'idempotency_key']).where('agent', '=', agent).execute();
    expect(rows).toEqual([{ id: [...ids][0], idempotency_key: 'k-concurrent' }]);
  });

  it('scope is the agent; a different body is 422; a key still in flight is 409', async () => {
    const a1 = await newAgent();
    const a2 = await newAgent();
    const x = await post(`/v1/agents/${a1}/executions`, { message: 'm' }, { 'idempotency-key': 'shared' });
    const y = await post(`/v1/agents/${a2}/executions`, { message: 'm' }, { 'idempotency-key': 'shared' });
    expect([x.status, y.status]).toEqual([201, 201]);
    expect(x.body.execution_id).not.toBe(y.body.execution_id);
    refused(
      await post(`/v1/agents/${a1}/executions`, { message: 'other' }, { 'idempotency-key': 'shared' }),
      422,
      'idempotency_key_reused',
    );

    // A request holding the key right now (written as its claim would be).
    const body = { message: 'slow' };
    const now = Date.now();
    await ts.store.db
      .insertInto('idempotency_keys')
      .values({
        scope: `agent:${a1}`,
        idem_key: 'held',
        request_hash: fingerprint('submit', a1, JSON.stringify(body)),
        state: 'in_flight',
        locked_until: now + 60_000,
        status_code: null,
        response: null,
        execution_id: null,
        created_at: now,
        expires_at: now + 86_400_000,
      })
      .execute();
    // A server that waits 100 ms for the answer in flight (default 5 s; BATON_IDEMPOTENCY_WAIT_MS).
    const impatient = await buildServer({ engine, keys: new KeyStore(ts.store), logger: false, idempotency: { waitMs: 100 } });
    try {
      const started = Date.now();
      const r = await impatient.inject({
        method: 'POST',
        url: `/v1/agents/${a1}/executions`,
        payload: body,
        headers: { authorization: `Bearer ${admin}`, 'idempotency-key': 'held' },
      });
      refused({ status: r.statusCode, body: r.json(), headers: r.headers }, 409, 'idempotency_in_flight');
      expect(Date.now() - started).toBeLessThan(2_500);
    } finally {
      await impatient.close();
    }
    // Its holder died: once the claim lapses, the next request takes the key over.
    await ts.store.db
      .updateTable('idempotency_keys')
      .set({ locked_until: now - 1 })
      .where('idem_key', '=', 'held')
      .execute();
    expect((await post(`/v1/agents/${a1}/executions`, body, { 'idempotency-key': 'held' })).status).toBe(201);
    // An expired key is forgotten.
    await ts.store.db
      .updateTable('idempotency_keys')
      .set({ expires_at: now - 1 })
      .where('idem_key', '=', 'shared')
      .where('scope', '=', `agent:${a1}`)
      .execute();
    const again = await post(`/v1/agents/${a1}/executions`, { message: 'other' }, { 'idempotency-key': 'shared' });
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replay']).toBeUndefined();
  });
});

describe('webhooks', () => {
  it('the answer matrix: 404 token, 413 size, 401 signature, 400 JSON, 202 with the body in the payload, replay, 422 reuse', async () => {
    const agent = await newAgent({ max_backlog: 50 });
    const created = await post('/v1/webhooks', { name: 'gh', agent, generate_secret: true });
    expect(created.status).toBe(201);
    const { token, path, secret, id } = created.body;
    expect(token).toMatch(/^bwh_[A-Za-z0-9_-]{43}$/);
    expect(secret).toMatch(/^whsec_/);
    const stored = await ts.store.db.selectFrom('webhooks').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    expect(JSON.stringify(stored)).not.toContain(token);
    expect(JSON.stringify(stored)).not.toContain(secret);
    const listed = await call('GET', '/v1/webhooks');
    expect(JSON.stringify(listed.body)).not.toContain(token);

    const body = JSON.stringify({ action: 'opened', number: 7 });
    refused(await hook('/hooks/bwh_' + 'x'.repeat(43), body), 404, 'not_found');
    refused(await hook('/hooks/nonsense', body), 404, 'not_found');
    const big = JSON.stringify({ pad: 'x'.repeat(WEBHOOK_BODY_LIMIT) });
    refused(await hook(path, big, { 'x-baton-signature': sign(secret, big) }), 413, 'payload_too_large');
    refused(await hook(path, body), 401, 'invalid_signature');
    refused(await hook(path, body, { 'x-baton-signature': sign('wrong-secret-0123456789', body) }), 401, 'invalid_signature');
    refused(await hook(path, body, { 'x-baton-signature': 'sha256=zz' }), 401, 'invalid_signature');
    refused(await hook(path, '{not json', { 'x-baton-signature': sign(secret, '{not json') }), 400, 'invalid_json');
    expect(await countRows({ agent })).toBe(0);
    // Refusals are audited as counts per webhook and minute (test/delivery/webhooks.senders.test.ts), not a row each.
    const refusals = await ts.store.db
      .selectFrom('audit_log')
      .select(['action', 'detail'])
      .where('subject', '=', id)
      .where('action', '=', 'webhook.refused')
      .execute();
    expect(refusals).toEqual([]);

    const ok = await hook(path, body, { 'x-baton-signature': sign(secret, body), 'idempotency-key': 'delivery-1' });
    expect(ok.status).toBe(202);
    expect(ok.body).toEqual({ status: 'queued', execution_id: expect.any(String), agent_paused: false });
    const ex = (await call('GET', `/v1/executions/${ok.body.execution_id}`)).body;
    expect(ex).toMatchObject({ trigger: 'webhook', agent, message: 'webhook gh', idempotency_key: 'delivery-1' });
    expect(ex.payload.webhook).toMatchObject({ id, body: { action: 'opened', number: 7 } });
    expect(ex.origin).toMatchObject({ webhook_id: id, source_address: '127.0.0.1' });
    const audit = await ts.store.db.selectFrom('audit_log').selectAll().where('execution_id', '=', ex.id).execute();
    expect(audit.map((a) => a.action)).toEqual(['webhook.trigger']);

    const replay = await hook(path, body, { 'x-hub-signature-256': sign(secret, body), 'idempotency-key': 'delivery-1' });
    expect(replay.status).toBe(202);
    expect(replay.headers['idempotent-replay']).toBe('true');
    expect(replay.body).toEqual(ok.body);
    const other = JSON.stringify({ action: 'closed' });
    refused(
      await hook(path, other, { 'x-hub-signature-256': sign(secret, other), 'idempotency-key': 'delivery-1' }),
      422,
      'idempotency_key_reused',
    );
    // Two identical pings without keys are two events.
    const p1 = await hook(path, body, { 'x-hub-signature-256': sign(secret, body) });
    const p2 = await hook(path, body, { 'x-hub-signature-256': sign(secret, body) });
    expect([p1.status, p2.status]).toEqual([202, 202]);
    expect(p1.body.execution_id).not.toBe(p2.body.execution_id);
    expect(await countRows({ agent })).toBe(3);

    // Rotation: the old token is a neutral 404 at once, the new one works with the new secret.
    const rotated = (await post(`/v1/webhooks/${id}/rotate`)).body;
    refused(await hook(path, body, { 'x-baton-signature': sign(secret, body) }), 404, 'not_found');
    expect((await hook(rotated.path, body, { 'x-baton-signature': sign(rotated.secret, body) })).status).toBe(202);
    expect((await call('DELETE', `/v1/webhooks/${id}`)).status).toBe(200);
    refused(await hook(rotated.path, body, { 'x-baton-signature': sign(rotated.secret, body) }), 404, 'not_found');
  });

  it('a schedule webhook busy under skip is coalesced: 202 already_running with the running id, and the key is completed', async () => {
    const agent = await newAgent();
    const s = await newSchedule(agent);
    const w = (await post('/v1/webhooks', { name: 'deploy', schedule_id: s.id })).body;
    expect(w.secret).toBeNull();
    const first = await hook(w.path, '{"ref":"main"}', { 'idempotency-key': 'd1' });
    expect(first.status).toBe(202);
    expect(first.body.status).toBe('queued');
    const ex = (await call('GET', `/v1/executions/${first.body.execution_id}`)).body;
    expect(ex).toMatchObject({ trigger: 'webhook', schedule_id: s.id, message: 'scheduled work' });
    expect(ex.payload).toMatchObject({ from: 'schedule', webhook: { id: w.id, body: { ref: 'main' } } });

    const busy = await hook(w.path, '{"ref":"dev"}', { 'idempotency-key': 'd2' });
    expect(busy.status).toBe(202);
    expect(busy.body).toEqual({ status: 'already_running', execution_id: first.body.execution_id, agent_paused: false });
    const replay = await hook(w.path, '{"ref":"dev"}', { 'idempotency-key': 'd2' });
    expect(replay.status).toBe(202);
    expect(replay.headers['idempotent-replay']).toBe('true');
    expect(replay.body).toEqual(busy.body);
    const key = await ts.store.db
      .selectFrom('idempotency_keys')
      .selectAll()
      .where('scope', '=', `webhook:${w.id}`)
      .where('idem_key', '=', 'd2')
      .executeTakeFirstOrThrow();
    expect(key).toMatchObject({ state: 'completed', execution_id: first.body.execution_id });
    expect(await countRows({ schedule_id: s.id })).toBe(1);
    expect((await call('GET', '/v1/webhooks')).body.webhooks.find((x: any) => x.id === w.id).last_delivery_at).toBe(ex.created_at);
    // An empty body is a ping: payload body null.
    await engine.cancel(first.body.execution_id, 'test');
    const ping = await hook(w.path, '');
    expect(ping.status).toBe(202);
  });

  it('a genuine internal failure answers 503, creates nothing and releases the key; the retry succeeds', async () => {
    const agent = await newAgent();
    const w = (await post('/v1/webhooks', { name: 'fragile', agent })).body;
    // A real database failure: inserts into executions are refused while this trigger exists.
    if (STORE_KIND === 'postgres') {
      await sql`CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk on fire'; END; $$`.execute(
        ts.store.db,
      );
      await sql`CREATE TRIGGER test_refuse BEFORE INSERT ON executions FOR EACH ROW EXECUTE FUNCTION test_refuse()`.execute(ts.store.db);
    } else {
      await sql`CREATE TRIGGER test_refuse BEFORE INSERT ON executions BEGIN SELECT RAISE(ABORT, 'disk on fire'); END`.execute(ts.store.db);
    }
    let failed: Answer;
    try {
      failed = await hook(w.path, '{"n":1}', { 'idempotency-key': 'retry-me' });
    } finally {
      await sql`DROP TRIGGER test_refuse ${sql.raw(STORE_KIND === 'postgres' ? 'ON executions' : '')}`.execute(ts.store.db);
    }
    refused(failed, 503, 'unavailable');
    expect(await countRows({ agent })).toBe(0);
    expect(await ts.store.db.selectFrom('idempotency_keys').selectAll().where('scope', '=', `webhook:${w.id}`).execute()).toEqual([]);
    const retried = await hook(w.path, '{"n":1}', { 'idempotency-key': 'retry-me' });
    expect(retried.status).toBe(202);
    expect(retried.headers['idempotent-replay']).toBeUndefined();
    expect(await countRows({ agent })).toBe(1);
  });

  it('creation refuses a missing or double target (400) and an unknown one (404)', async () => {
    const agent = await newAgent();
    refused(await post('/v1/webhooks', { name: 'x' }), 400, 'validation_error');
    refused(await post('/v1/webhooks', { name: 'x', agent, schedule_id: 'sc_x' }), 400, 'validation_error');
    refused(await post('/v1/webhooks', { name: 'x', agent: 'ghost' }), 404, 'not_found');
    refused(await post('/v1/webhooks', { name: 'x', schedule_id: 'sc_ghost' }), 404, 'not_found');
    refused(await post('/v1/webhooks', { name: 'x', agent, secret: 'short' }), 400, 'validation_error');
  });
});

describe('schedule lists are bounded (issue #10)', () => {
  it('pages by agent and name with a cursor; items carry previews of message and payload, the single read has them whole', async () => {
    const agent = await newAgent();
    const big = await newSchedule(agent, { name: 'a-big', message: 'm'.repeat(5_000), payload: { blob: 'x'.repeat(50_000) } });
    for (const name of ['b', 'c', 'd', 'e']) await newSchedule(agent, { name });
    const first = await call('GET', `/v1/agents/${agent}/schedules?limit=2`);
    expect(first.status).toBe(200);
    expect(first.body.schedules.map((x: any) => x.name)).toEqual(['a-big', 'b']);
    const item = first.body.schedules[0];
    expect(item).not.toHaveProperty('payload');
    expect(item.message).toBe('m'.repeat(PREVIEW_CHARS) + '…');
    expect(item.payload_preview).toBe(`{"blob":"${'x'.repeat(PREVIEW_CHARS - 9)}…`);
    // Of its due times only the stored next one: looking further ahead compiles a rare expression per item.
    expect(item).not.toHaveProperty('next_runs');
    expect(item.next_run_at).toBe(big.next_run_at);
    expect((await call('GET', `/v1/schedules/${big.id}`)).body.next_runs).toHaveLength(5);
    expect((await call('GET', `/v1/schedules/${big.id}`)).body).toMatchObject({
      message: 'm'.repeat(5_000),
      payload: { blob: 'x'.repeat(50_000) },
    });
    const names: string[] = [];
    let cursor: string | null = null;
    do {
      const page: Answer = await call('GET', `/v1/agents/${agent}/schedules?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      names.push(...page.body.schedules.map((x: any) => x.name));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(names).toEqual(['a-big', 'b', 'c', 'd', 'e']);
    // Every agent's list pages the same way, in (agent, name) order, with the default page size.
    const all = await call('GET', '/v1/schedules');
    const keys = all.body.schedules.map((x: any) => `${x.agent}\u0000${x.name}`);
    expect(keys).toEqual([...keys].sort());
    expect(all.body.schedules.length).toBeLessThanOrEqual(CONFIG_PAGE.default);
    // The client reads every page.
    const client = new BatonClient({ server: 'http://test', key: admin, fetch: injectFetch });
    expect((await client.listSchedules(agent)).map((x) => x.name)).toEqual(names);
  });

  it('refuses a limit out of bounds or a cursor it did not make, naming the field', async () => {
    for (const limit of ['0', String(CONFIG_PAGE.max + 1), 'abc'])
      expect(refused(await call('GET', `/v1/schedules?limit=${limit}`), 400, 'validation_error').message).toMatch(/limit/);
    // (A NUL in a key reached PostgreSQL as a parameter it refuses: a 500.)
    for (const cursor of [
      'not-a-cursor',
      Buffer.from('[1,2]').toString('base64url'),
      Buffer.from('["a\\u0000","b"]').toString('base64url'),
    ])
      expect(refused(await call('GET', `/v1/schedules?cursor=${cursor}`), 400, 'validation_error').message).toMatch(/querystring\.cursor/);
  });
});

describe('webhook lists are bounded (issue #10)', () => {
  it('pages by agent, name and id with a cursor; items carry a preview of the message, the single read has it whole', async () => {
    const agent = await newAgent();
    const other = await newAgent();
    const big = (await post('/v1/webhooks', { name: 'a-big', agent, message: 'w'.repeat(5_000), generate_secret: true })).body;
    // Names need not be unique: the id breaks the tie.
    const twins = [
      (await post('/v1/webhooks', { name: 'twin', agent })).body.id,
      (await post('/v1/webhooks', { name: 'twin', agent })).body.id,
    ].sort();
    await post('/v1/webhooks', { name: 'z', agent });
    await post('/v1/webhooks', { name: 'elsewhere', agent: other });
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: Answer = await call('GET', `/v1/webhooks?agent=${agent}&limit=1${cursor ? `&cursor=${cursor}` : ''}`);
      expect(page.status).toBe(200);
      expect(page.body.webhooks.length).toBeLessThanOrEqual(1);
      seen.push(...page.body.webhooks.map((w: any) => w.id));
      cursor = page.body.next_cursor;
      pages++;
    } while (cursor);
    expect(seen).toEqual([big.id, ...twins, expect.any(String)]);
    expect(pages).toBe(5);
    const item = (await call('GET', `/v1/webhooks?agent=${agent}&limit=1`)).body.webhooks[0];
    expect(item).toMatchObject({ id: big.id, name: 'a-big', signed: true, message: 'w'.repeat(PREVIEW_CHARS) + '…' });
    expect(JSON.stringify(item)).not.toContain(big.token);
    const whole = await call('GET', `/v1/webhooks/${big.id}`);
    expect(whole.body).toMatchObject({ id: big.id, message: 'w'.repeat(5_000), signed: true });
    expect(JSON.stringify(whole.body)).not.toContain(big.token);
    expect(JSON.stringify(whole.body)).not.toContain(big.secret);
    refused(await call('GET', '/v1/webhooks/wh_nope'), 404, 'not_found');
    refused(await call('GET', '/v1/webhooks?agent=nobody-here'), 404, 'not_found');
    // An empty cursor is no cursor, as on every list.
    expect((await call('GET', `/v1/webhooks?agent=${agent}&limit=1&cursor=`)).body.webhooks.map((w: any) => w.id)).toEqual([big.id]);
    // Every agent's list, in (agent, name, id) order; the client reads every page.
    const all = (await call('GET', '/v1/webhooks')).body.webhooks;
    const keys = all.map((w: any) => `${w.agent}\u0000${w.name}\u0000${w.id}`);
    expect(keys).toEqual([...keys].sort());
    const client = new BatonClient({ server: 'http://test', key: admin, fetch: injectFetch });
    expect((await client.listWebhooks(agent)).map((w) => w.id)).toEqual(seen);
    expect((await client.getWebhook(big.id)).message).toBe('w'.repeat(5_000));
    for (const q of [
      'limit=0',
      `limit=${CONFIG_PAGE.max + 1}`,
      'cursor=not-a-cursor',
      `cursor=${Buffer.from('["a","b"]').toString('base64url')}`,
    ])
      expect(refused(await call('GET', `/v1/webhooks?${q}`), 400, 'validation_error').message).toMatch(/querystring\.(limit|cursor)/);
  });
});

describe('OpenAPI', () => {
  it('documents the trigger routes', async () => {
    const doc = (await call('GET', '/openapi.json')).body;
    for (const path of [
      '/v1/agents/{agent}/schedules',
      '/v1/schedules/{id}',
      '/v1/schedules/{id}/trigger',
      '/v1/webhooks',
      '/v1/webhooks/{id}',
      '/v1/webhooks/{id}/rotate',
      '/hooks/{token}',
    ]) {
      expect(Object.keys(doc.paths)).toContain(path);
    }
  });
});

describe('webhook rate limits come before the token check', () => {
  it('429 per source address, even for unknown tokens', async () => {
    const keys = new KeyStore(ts.store);
    // Burst 0.002: no token at all after the first (`baton up`: BATON_HOOK_RATE_PER_ADDRESS).
    const limited = await buildServer({ engine, keys, logger: false, hookRates: { perAddress: 0.001 } });
    try {
      const hit = () =>
        limited.inject({
          method: 'POST',
          url: '/hooks/bwh_' + 'y'.repeat(43),
          payload: '{}',
          headers: { 'content-type': 'application/json' },
        });
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++) statuses.push((await hit()).statusCode);
      expect(statuses).toEqual([429, 429, 429]);
      const r = await hit();
      expect(JSON.parse(r.body).error).toBe('rate_limited');
      expect(r.headers['retry-after']).toBe('1');
    } finally {
      await limited.close();
    }
  });
});
