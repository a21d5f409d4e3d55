import type { FastifyInstance, InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../../src/api/server.ts';
import { KeyStore } from '../../src/auth/keys.ts';
import { DEFAULTS } from '../../src/config.ts';
import { Engine } from '../../src/engine/engine.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { agentMakerOverApi } from '../helpers/agents.ts';

let ts: TestStore;
let engine: Engine;
let app: FastifyInstance;
let admin: string;
let n = 0;

/** Every answer this file received, so the last test can prove no secret ever leaked. */
const answers: Array<{ method: string; url: string; status: number; text: string }> = [];
/** The secret half of every key created here. */
const secrets: string[] = [];

interface Answer {
  status: number;
  body: any;
  text: string;
  headers: Record<string, unknown>;
}

async function call(
  method: InjectOptions['method'],
  url: string,
  opts: { body?: unknown; key?: string | null; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...opts.headers };
  const key = opts.key === undefined ? admin : opts.key;
  if (key !== null) headers.authorization ??= `Bearer ${key}`;
  const res = await app.inject({ method, url, headers, ...(opts.body === undefined ? {} : { payload: opts.body as any }) });
  answers.push({ method: String(method), url, status: res.statusCode, text: res.body });
  return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : null, text: res.body, headers: res.headers };
}
const get = (url: string, key?: string | null) => call('GET', url, { key });
const post = (url: string, body?: unknown, key?: string | null) => call('POST', url, { body, key });

/** Assert an exact refusal and return its body. */
function refused(a: Answer, status: number, error: string): any {
  expect({ status: a.status, error: a.body?.error }).toEqual({ status, error });
  expect(typeof a.body.message).toBe('string');
  expect(a.body.message.length).toBeGreaterThan(0);
  return a.body;
}

const newAgent = agentMakerOverApi(
  (url, body) => post(url, body),
  () => `agent-${++n}`,
);

async function submit(agent: string, body: Record<string, unknown> = {}): Promise<string> {
  const r = await post(`/v1/agents/${agent}/executions`, { message: 'do it', ...body });
  expect(r.status).toBe(201);
  return r.body.execution_id;
}

async function claimOne(
  agent: string,
  key?: string,
): Promise<{ execution_id: string; lease_token: string; lease_expires_at: string; deadline_at: string }> {
  const r = await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0 }, key);
  expect(r.status).toBe(200);
  expect(r.body.tasks).toHaveLength(1);
  return r.body.tasks[0];
}

async function createKey(body: Record<string, unknown>): Promise<{ id: string; key: string }> {
  const r = await post('/v1/keys', body);
  expect(r.status).toBe(201);
  secrets.push(r.body.key.slice(-43));
  return r.body;
}

beforeAll(async () => {
  ts = await openTestStore();
  // A long poll interval: a waiting claim can only finish early through a wake-up.
  engine = new Engine({ store: ts.store, nodeId: 'api-test', claimPollMs: 30_000 });
  const keys = new KeyStore(ts.store);
  app = await buildServer({ engine, keys, logger: false });
  admin = (await keys.create({ name: 'admin', scope: 'admin' }, 'test')).key;
  secrets.push(admin.slice(-43));
});
afterAll(async () => {
  await app?.close();
  engine?.close();
  await ts?.cleanup();
});

describe(`HTTP API (${STORE_KIND})`, () => {
  describe('auth', () => {
    it('refuses a request without a key, with a malformed key, with an unknown key', async () => {
      refused(await get('/v1/agents', null), 401, 'unauthorized');
      refused(await call('GET', '/v1/agents', { key: null, headers: { authorization: 'Basic YTpi' } }), 401, 'unauthorized');
      expect(refused(await get('/v1/agents', 'not-a-key'), 401, 'unauthorized').message).toMatch(/malformed/);
      const unknown = `bt_${'ab'.repeat(8)}_${'x'.repeat(43)}`;
      expect(refused(await get('/v1/agents', unknown), 401, 'unauthorized').message).toMatch(/unknown or revoked/);
      // A real key id with a wrong secret.
      const wrongSecret = admin.slice(0, -43) + 'y'.repeat(43);
      refused(await get('/v1/agents', wrongSecret), 401, 'unauthorized');
      refused(await post('/v1/agents', { name: 'never-created' }, null), 401, 'unauthorized');
      refused(await get('/v1/agents/never-created'), 404, 'not_found');
    });

    it('refuses a revoked key at once', async () => {
      const k = await createKey({ name: 'short-lived', scope: 'admin' });
      expect((await get('/v1/agents', k.key)).status).toBe(200);
      const revoked = await call('DELETE', `/v1/keys/${k.id}`);
      expect(revoked.status).toBe(200);
      expect(revoked.body.revoked_at).toMatch(/^\d{4}-\d\d-\d\dT/);
      expect(revoked.body).not.toHaveProperty('key');
      expect(refused(await get('/v1/agents', k.key), 401, 'unauthorized').message).toMatch(/unknown or revoked/);
      // Revoking again is harmless and answers the same key.
      const again = await call('DELETE', `/v1/keys/${k.id}`);
      expect(again.status).toBe(200);
      expect(again.body.revoked_at).toBe(revoked.body.revoked_at);
      refused(await call('DELETE', '/v1/keys/0123456789abcdef'), 404, 'not_found');
      refused(await call('DELETE', '/v1/keys/not!an!id'), 400, 'validation_error');
    });

    it('never revokes the last active admin key (409 last_admin_key); two admins revoking each other at once leave one', async () => {
      const own = await openTestStore();
      const ownEngine = new Engine({ store: own.store, nodeId: 'api-test-keys' });
      const ownKeys = new KeyStore(own.store);
      const ownApp = await buildServer({ engine: ownEngine, keys: ownKeys, logger: false });
      const del = (id: string, key: string) =>
        ownApp.inject({ method: 'DELETE', url: `/v1/keys/${id}`, headers: { authorization: `Bearer ${key}` } });
      try {
        const a = await ownKeys.create({ name: 'a', scope: 'admin' }, 'test');
        const b = await ownKeys.create({ name: 'b', scope: 'admin' }, 'test');
        await ownEngine.agents.create({ name: 'w' }, 'test');
        await ownKeys.create({ name: 'worker', scope: 'agent', agent: 'w' }, 'test'); // not an admin: does not count
        // Two revokes at once, each of the other's key: exactly one can go through.
        const settled = await Promise.allSettled([ownKeys.revoke(a.row.id, 'test'), ownKeys.revoke(b.row.id, 'test')]);
        expect(settled.map((r) => r.status).sort()).toEqual(['fulfilled', 'rejected']);
        const refusal = (settled.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason;
        expect(refusal).toMatchObject({ code: 'last_admin_key' });
        const survivor = settled[0]!.status === 'fulfilled' ? b : a;
        // Over HTTP: 409 with the code, and the key still works.
        const self = await del(survivor.row.id, survivor.key);
        expect(self.statusCode).toBe(409);
        expect(JSON.parse(self.body)).toMatchObject({ error: 'last_admin_key', message: expect.stringMatching(/last active admin key/) });
        const still = await ownApp.inject({ method: 'GET', url: '/v1/agents', headers: { authorization: `Bearer ${survivor.key}` } });
        expect(still.statusCode).toBe(200);
        // With another admin key, it goes.
        const c = await ownKeys.create({ name: 'c', scope: 'admin' }, 'test');
        expect((await del(survivor.row.id, c.key)).statusCode).toBe(200);
      } finally {
        await ownApp.close();
        ownEngine.close();
        await own.cleanup();
      }
    });

    it('serves /healthz, /readyz and /openapi.json without a key', async () => {
      const health = await get('/healthz', null);
      expect(health.status).toBe(200);
      expect(health.body).toEqual({ status: 'ok' });
      const ready = await get('/readyz', null);
      expect(ready.status).toBe(200);
      expect(ready.body).toEqual({ status: 'ready', store: STORE_KIND });
      const spec = await get('/openapi.json', null);
      expect(spec.status).toBe(200);
      expect(spec.body.openapi).toMatch(/^3\./);
      const paths = Object.keys(spec.body.paths);
      for (const p of [
        '/v1/agents',
        '/v1/agents/{agent}',
        '/v1/agents/{agent}/executions',
        '/v1/agents/{agent}/claim',
        '/v1/executions',
        '/v1/executions/{id}',
        '/v1/executions/{id}/cancel',
        '/v1/executions/{id}/heartbeat',
        '/v1/executions/{id}/complete',
        '/v1/executions/{id}/release',
        '/v1/keys',
        '/v1/keys/{id}',
      ]) {
        expect(paths).toContain(p);
      }
      expect(Object.keys(spec.body.paths['/v1/agents'])).toEqual(expect.arrayContaining(['get', 'post']));
      expect(Object.keys(spec.body.paths['/v1/agents/{agent}'])).toEqual(expect.arrayContaining(['get', 'patch', 'delete']));
      expect(paths).not.toContain('/healthz');
    });

    it('answers an unknown route 404 not_found', async () => {
      refused(await get('/v1/nothing-here'), 404, 'not_found');
      refused(await call('PUT', '/v1/agents'), 404, 'not_found');
      // A URL the router cannot decode is refused in the same vocabulary.
      const badUrl = refused(await post('/v1/executions/%E0%A4%A/heartbeat', { lease_token: 't' }), 400, 'bad_request');
      expect(Object.keys(badUrl).sort()).toEqual(['error', 'message']);
    });
  });

  describe('agents', () => {
    it('creates with defaults, lists, reads, updates and deletes', async () => {
      const name = `agent-${++n}`;
      const created = await post('/v1/agents', { name, description: 'writes tests', max_parallel: 3 });
      expect(created.status).toBe(201);
      expect(created.body).toMatchObject({
        name,
        description: 'writes tests',
        max_parallel: 3,
        max_backlog: DEFAULTS.maxBacklog,
        timeout_seconds: DEFAULTS.timeoutSeconds,
        lease_ttl_seconds: DEFAULTS.leaseTtlSeconds,
        max_redeliveries: DEFAULTS.maxRedeliveries,
        delivery: 'pull',
        push_url: null,
        running: 0,
        queued: 0,
      });

      const list = await get('/v1/agents');
      expect(list.status).toBe(200);
      expect(list.body.agents.map((a: any) => a.name)).toContain(name);

      await submit(name);
      const one = await get(`/v1/agents/${name}`);
      expect(one.status).toBe(200);
      expect(one.body).toMatchObject({ name, running: 0, queued: 1 });

      const patched = await call('PATCH', `/v1/agents/${name}`, { body: { max_parallel: 5, description: null } });
      expect(patched.status).toBe(200);
      expect(patched.body).toMatchObject({ name, max_parallel: 5, description: null, queued: 1 });
      expect(Date.parse(patched.body.updated_at)).toBeGreaterThanOrEqual(Date.parse(created.body.updated_at));

      const deleted = await call('DELETE', `/v1/agents/${name}`);
      expect(deleted.status).toBe(200);
      expect(deleted.body).toEqual({ deleted: name, cancelled: 1, cancel_requested: 0 });
      refused(await get(`/v1/agents/${name}`), 404, 'not_found');
      refused(await call('DELETE', `/v1/agents/${name}`), 404, 'not_found');
      refused(await call('PATCH', `/v1/agents/${name}`, { body: { max_parallel: 1 } }), 404, 'not_found');
    });

    it('refuses a duplicate name with 409 already_exists', async () => {
      const name = await newAgent();
      const dup = refused(await post('/v1/agents', { name }), 409, 'already_exists');
      expect(dup.message).toContain(name);
    });

    it.each([
      [{ max_parallel: -1 }, 'body.max_parallel'],
      [{ max_parallel: 1.5 }, 'body.max_parallel'],
      [{ max_parallel: '2' }, 'body.max_parallel'],
      [{ max_backlog: 1_000_001 }, 'body.max_backlog'],
      [{ timeout_seconds: 0 }, 'body.timeout_seconds'],
      [{ lease_ttl_seconds: 3601 }, 'body.lease_ttl_seconds'],
      [{ max_redeliveries: 101 }, 'body.max_redeliveries'],
      [{ delivery: 'carrier-pigeon' }, 'body.delivery'],
      [{ push_url: 'not a url' }, 'body.push_url'],
      [{ push_url: 'http://example.com/\u0000' }, 'body.push_url'],
      [{ push_url: 'file:///etc/passwd' }, 'body.push_url'],
      [{ push_url: 'ftp://example.com/task' }, 'body.push_url'],
      [{ delivery: 'push' }, 'body.push_url'],
      [{ description: 'x'.repeat(1001) }, 'body.description'],
      [{ colour: 'blue' }, 'colour'],
    ])('refuses bad settings %j with a message naming %s', async (settings, field) => {
      const name = `agent-${++n}`;
      expect(refused(await post('/v1/agents', { name, ...settings }), 400, 'validation_error').message).toContain(field);
      refused(await get(`/v1/agents/${name}`), 404, 'not_found');
      const existing = await newAgent();
      expect(refused(await call('PATCH', `/v1/agents/${existing}`, { body: settings }), 400, 'validation_error').message).toContain(field);
    });

    it('refuses a bad or missing name and a body that is not an object', async () => {
      expect(refused(await post('/v1/agents', {}), 400, 'validation_error').message).toContain('body.name');
      expect(refused(await post('/v1/agents', { name: 'Has_Capitals' }), 400, 'validation_error').message).toContain('body.name');
      expect(refused(await post('/v1/agents', { name: 'x'.repeat(64) }), 400, 'validation_error').message).toContain('body.name');
      expect(refused(await post('/v1/agents', { name: 'ok', extra: 1 }), 400, 'validation_error').message).toContain('extra');
      refused(await post('/v1/agents', [1, 2]), 400, 'validation_error');
      refused(await post('/v1/agents'), 400, 'validation_error');
      refused(await call('POST', '/v1/agents', { body: '{"name":', headers: { 'content-type': 'application/json' } }), 400, 'invalid_json');
      refused(
        await call('POST', '/v1/agents', { body: '<agent/>', headers: { 'content-type': 'application/xml' } }),
        415,
        'unsupported_media_type',
      );
      // The name in the path is validated too.
      expect(refused(await get('/v1/agents/Not_Valid'), 400, 'validation_error').message).toContain('params.agent');
      // Past the router's bound: a 400 like any bad parameter, without the URL quoted back.
      const long = refused(await get(`/v1/executions/ex_${'a'.repeat(200)}`), 400, 'validation_error');
      expect(long.message).toBe('params: a path parameter is longer than 100 characters');
    });

    it('never stores a NUL character (PostgreSQL text cannot hold one)', async () => {
      const name = `agent-${++n}`;
      expect(refused(await post('/v1/agents', { name, description: 'a\u0000b' }), 400, 'validation_error').message).toContain(
        'body.description',
      );
      refused(await get(`/v1/agents/${name}`), 404, 'not_found');
    });

    it('never stores a lone surrogate: a 400 naming the field on every store, never a 500', async () => {
      // JSON's \ud800 is no character: PostgreSQL's JSON parser refuses it and the drivers rewrite it, each store its own way.
      const name = `agent-${++n}`;
      for (const bad of ['a\ud800b', '\udc00', 'x\udbff'])
        expect(refused(await post('/v1/agents', { name, description: bad }), 400, 'validation_error').message).toContain(
          'body.description',
        );
      expect((await post('/v1/agents', { name, description: 'paired \ud83d\ude00 is fine' })).status).toBe(201);
      refused(await post(`/v1/agents/${name}/executions`, { message: 'a\ud800' }), 400, 'validation_error');
      // A group's members go to the database as one JSON value (insertMany): it used to be a 500 on PostgreSQL.
      const g = refused(
        await post('/v1/groups', {
          members: [
            { agent: name, message: 'ok' },
            { agent: name, message: '\ud800' },
          ],
        }),
        400,
        'validation_error',
      );
      expect(g.message).toContain('body.members.1.message');
      expect((await get(`/v1/executions?agent=${name}`)).body.executions).toEqual([]);
    });
  });

  describe('submit', () => {
    it('answers 201 with the real execution id, queued', async () => {
      const agent = await newAgent();
      const r = await post(`/v1/agents/${agent}/executions`, { message: 'summarise', payload: { doc: 42 }, priority: -5 });
      expect(r.status).toBe(201);
      expect(r.body.execution_id).toBe(r.body.execution.id);
      expect(r.body.execution_id).toMatch(/^ex_/);
      expect(r.body.status).toBe('queued');
      expect(r.body.agent).toBe(agent);
      expect(r.body.execution).toMatchObject({
        agent,
        status: 'queued',
        attempt: 0,
        trigger: 'api',
        message: 'summarise',
        payload: { doc: 42 },
        priority: -5,
        run_after: null,
      });
      const read = await get(`/v1/executions/${r.body.execution_id}`);
      expect(read.status).toBe(200);
      expect(read.body.status).toBe('queued');
    });

    it('records the CLI as the trigger when the client says so', async () => {
      const agent = await newAgent();
      const r = await call('POST', `/v1/agents/${agent}/executions`, { body: { message: 'm' }, headers: { 'x-baton-client': 'cli' } });
      expect(r.status).toBe(201);
      expect(r.body.execution.trigger).toBe('cli');
    });

    it('takes run_after or delay_seconds, never both', async () => {
      const agent = await newAgent();
      const at = new Date(Date.now() + 3_600_000).toISOString();
      const a = await post(`/v1/agents/${agent}/executions`, { message: 'm', run_after: at });
      expect(a.status).toBe(201);
      expect(a.body.execution.run_after).toBe(at);
      const before = Date.now();
      const b = await post(`/v1/agents/${agent}/executions`, { message: 'm', delay_seconds: 60 });
      expect(b.status).toBe(201);
      const due = Date.parse(b.body.execution.run_after);
      // On PostgreSQL the store's time is the database's clock as this process reads it (within half
      // a round trip: src/store/postgres-clock.ts), not this test's Date.now(): a few ms either way.
      const slack = STORE_KIND === 'postgres' ? 50 : 0;
      expect(due).toBeGreaterThanOrEqual(before + 60_000 - slack);
      expect(due).toBeLessThan(Date.now() + 60_000 + 1 + slack);
      const both = refused(
        await post(`/v1/agents/${agent}/executions`, { message: 'm', run_after: at, delay_seconds: 5 }),
        400,
        'validation_error',
      );
      expect(both.message).toContain('body.run_after');
      expect(both.message).toContain('body.delay_seconds');
      // A delayed task is not claimable yet.
      expect((await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0 })).status).toBe(204);
    });

    it('refuses an unknown agent with 404', async () => {
      refused(await post('/v1/agents/no-such-agent/executions', { message: 'm' }), 404, 'not_found');
    });

    it('refuses a full backlog with 429 backlog_full and creates nothing', async () => {
      const agent = await newAgent({ max_backlog: 2 });
      await submit(agent);
      await submit(agent);
      const full = refused(await post(`/v1/agents/${agent}/executions`, { message: 'one too many' }), 429, 'backlog_full');
      expect(full).toMatchObject({ agent, max_backlog: 2 });
      expect((await get(`/v1/executions?agent=${agent}`)).body.executions).toHaveLength(2);
      // The refusal itself is audited, and that is its only trace.
      const audit = await ts.store.db
        .selectFrom('audit_log')
        .select(['action', 'detail'])
        .where('subject', '=', agent)
        .where('action', '=', 'execution.refused')
        .execute();
      expect(audit).toHaveLength(1);
    });

    it('refuses a payload over 256 KiB serialised with 413 payload_too_large', async () => {
      const agent = await newAgent();
      // JSON.stringify adds two quotes: this payload is exactly the limit.
      const atLimit = 'x'.repeat(DEFAULTS.payloadLimitBytes - 2);
      expect((await post(`/v1/agents/${agent}/executions`, { message: 'm', payload: atLimit })).status).toBe(201);
      const over = refused(
        await post(`/v1/agents/${agent}/executions`, { message: 'm', payload: atLimit + 'x' }),
        413,
        'payload_too_large',
      );
      expect(over.message).toContain('body.payload');
      // Far past the route's body limit: Fastify refuses before parsing, in the same vocabulary,
      // naming the limit.
      const far = refused(
        await post(`/v1/agents/${agent}/executions`, { message: 'm', payload: 'x'.repeat(DEFAULTS.payloadLimitBytes * 5) }),
        413,
        'payload_too_large',
      );
      expect(far.message).toBe(
        `body: larger than ${(DEFAULTS.payloadLimitBytes + 128 * 1024).toLocaleString('en-US')} bytes, this route's limit`,
      );
      expect((await get(`/v1/executions?agent=${agent}`)).body.executions).toHaveLength(1);
    });

    it.each([
      [{}, 'body.message'],
      [{ message: '' }, 'body.message'],
      [{ message: 7 }, 'body.message'],
      [{ message: 'm', priority: 1.5 }, 'body.priority'],
      [{ message: 'm', priority: 1001 }, 'body.priority'],
      [{ message: 'm', run_after: 'tomorrow' }, 'body.run_after'],
      [{ message: 'm', run_after: '9999-12-31T23:59:59Z' }, 'body.run_after: at most a year ahead'],
      [{ message: 'm', delay_seconds: -1 }, 'body.delay_seconds'],
      [{ message: 'm', idempotency: 'k' }, 'idempotency'],
      [{ message: 'a\u0000b' }, 'body.message'],
    ])('refuses %j naming %s', async (body, field) => {
      const agent = await newAgent();
      expect(refused(await post(`/v1/agents/${agent}/executions`, body), 400, 'validation_error').message).toContain(field);
      expect((await get(`/v1/executions?agent=${agent}`)).body.executions).toHaveLength(0);
    });
  });

  describe('claim', () => {
    it('answers 200 with tasks carrying a lease', async () => {
      const agent = await newAgent({ max_parallel: 5 });
      const ids = [await submit(agent, { payload: [1] }), await submit(agent)];
      const r = await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0, max: 5, worker_id: 'w-1' });
      expect(r.status).toBe(200);
      expect(r.body.tasks.map((t: any) => t.execution_id).sort()).toEqual([...ids].sort());
      const t = r.body.tasks.find((x: any) => x.execution_id === ids[0]);
      expect(t).toMatchObject({ agent, attempt: 1, message: 'do it', payload: [1], lease_ttl_seconds: DEFAULTS.leaseTtlSeconds });
      expect(t.lease_token).toEqual(expect.any(String));
      expect(Date.parse(t.lease_expires_at)).toBeGreaterThan(Date.now());
      expect(Date.parse(t.deadline_at)).toBeGreaterThan(Date.now());
      const row = await get(`/v1/executions/${ids[0]}`);
      expect(row.body).toMatchObject({ status: 'running', lease_owner: 'w-1' });
    });

    it('claims without a body, naming the key as the lease owner', async () => {
      const agent = await newAgent();
      const id = await submit(agent);
      const r = await call('POST', `/v1/agents/${agent}/claim`);
      expect(r.status).toBe(200);
      expect(r.body.tasks[0].execution_id).toBe(id);
      expect((await get(`/v1/executions/${id}`)).body.lease_owner).toMatch(/^key:[0-9a-f]{16}$/);
    });

    it('answers 204 with no body when nothing arrives within wait_seconds', async () => {
      const agent = await newAgent();
      const start = Date.now();
      const r = await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0.2 });
      const took = Date.now() - start;
      expect(r.status).toBe(204);
      expect(r.text).toBe('');
      expect(took).toBeGreaterThanOrEqual(150);
      expect(took).toBeLessThan(5_000);
    });

    it('wakes a waiting claim when a task is submitted, long before its wait ends', async () => {
      const agent = await newAgent();
      const start = Date.now();
      const waiting = post(`/v1/agents/${agent}/claim`, { wait_seconds: 20 });
      await new Promise((r) => setTimeout(r, 300));
      const id = await submit(agent);
      const r = await waiting;
      const took = Date.now() - start;
      expect(r.status).toBe(200);
      expect(r.body.tasks[0].execution_id).toBe(id);
      // The engine's poll interval is 30 s here: only the wake-up can explain an early answer.
      expect(took).toBeLessThan(5_000);
    });

    it('refuses an unknown agent and bad options', async () => {
      refused(await post('/v1/agents/no-such-agent/claim', { wait_seconds: 0 }), 404, 'not_found');
      const agent = await newAgent();
      expect(refused(await post(`/v1/agents/${agent}/claim`, { wait_seconds: 61 }), 400, 'validation_error').message).toContain(
        'body.wait_seconds',
      );
      expect(refused(await post(`/v1/agents/${agent}/claim`, { wait_seconds: -1 }), 400, 'validation_error').message).toContain(
        'body.wait_seconds',
      );
      expect(refused(await post(`/v1/agents/${agent}/claim`, { max: 0 }), 400, 'validation_error').message).toContain('body.max');
      expect(refused(await post(`/v1/agents/${agent}/claim`, { max: 101 }), 400, 'validation_error').message).toContain('body.max');
      expect(refused(await post(`/v1/agents/${agent}/claim`, { worker_id: '' }), 400, 'validation_error').message).toContain(
        'body.worker_id',
      );
      expect(refused(await post(`/v1/agents/${agent}/claim`, { worker_id: 'w\u0000' }), 400, 'validation_error').message).toContain(
        'body.worker_id',
      );
      expect(refused(await post(`/v1/agents/${agent}/claim`, { wait: 1 }), 400, 'validation_error').message).toContain('wait');
    });
  });

  describe('heartbeat, complete, release', () => {
    it('heartbeat renews the lease', async () => {
      const agent = await newAgent();
      const id = await submit(agent);
      const task = await claimOne(agent);
      await new Promise((r) => setTimeout(r, 10));
      const hb = await post(`/v1/executions/${id}/heartbeat`, { lease_token: task.lease_token });
      expect(hb.status).toBe(200);
      expect(hb.body).toEqual({ lease_expires_at: expect.any(String), cancel_requested: false, deadline_at: task.deadline_at });
      expect(Date.parse(hb.body.lease_expires_at)).toBeGreaterThan(Date.parse(task.lease_expires_at));
    });

    it('complete records the outcome; a failure without a message gets a code', async () => {
      const agent = await newAgent({ max_parallel: 2 });
      const ok = await submit(agent);
      const bad = await submit(agent);
      const [t1, t2] = (await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0, max: 2 })).body.tasks;
      const tasks = new Map([t1, t2].map((t: any) => [t.execution_id, t.lease_token]));
      const done = await post(`/v1/executions/${ok}/complete`, {
        lease_token: tasks.get(ok),
        status: 'succeeded',
        result: { answer: 42 },
        usage: { input_tokens: 10, cost_usd: 0.01, model: 'm' },
      });
      expect(done.status).toBe(200);
      expect(done.body).toMatchObject({
        id: ok,
        status: 'succeeded',
        result: { answer: 42 },
        usage: { input_tokens: 10, cost_usd: 0.01, model: 'm' },
        error: null,
      });
      expect(done.body.duration_ms).toBeGreaterThanOrEqual(0);
      const failed = await post(`/v1/executions/${bad}/complete`, { lease_token: tasks.get(bad), status: 'failed' });
      expect(failed.status).toBe(200);
      expect(failed.body).toMatchObject({ status: 'failed', error: { code: 'failed' } });
      // The lease is spent: completing again is lease_lost.
      refused(await post(`/v1/executions/${ok}/complete`, { lease_token: tasks.get(ok), status: 'failed' }), 409, 'lease_lost');
      expect((await get(`/v1/executions/${ok}`)).body.status).toBe('succeeded');
    });

    it('complete takes an error code and message', async () => {
      const agent = await newAgent();
      const id = await submit(agent);
      const task = await claimOne(agent);
      const r = await post(`/v1/executions/${id}/complete`, {
        lease_token: task.lease_token,
        status: 'failed',
        error: { code: 'model_refused', message: 'no' },
      });
      expect(r.status).toBe(200);
      expect(r.body.error).toEqual({ code: 'model_refused', message: 'no' });
    });

    it('release hands the task back without spending an attempt', async () => {
      const agent = await newAgent();
      const id = await submit(agent);
      const task = await claimOne(agent);
      const r = await post(`/v1/executions/${id}/release`, { lease_token: task.lease_token });
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ id, status: 'queued', attempt: 0 });
      const again = await claimOne(agent);
      expect(again.execution_id).toBe(id);
      expect(again.lease_token).not.toBe(task.lease_token);
    });

    it('a wrong lease token is 409 lease_lost on every call and changes nothing', async () => {
      const agent = await newAgent();
      const id = await submit(agent);
      const task = await claimOne(agent);
      const before = (await get(`/v1/executions/${id}`)).body;
      for (const [verb, body] of [
        ['heartbeat', { lease_token: 'ls_wrong' }],
        ['complete', { lease_token: 'ls_wrong', status: 'succeeded' }],
        ['release', { lease_token: 'ls_wrong' }],
      ] as const) {
        const lost = refused(await post(`/v1/executions/${id}/${verb}`, body), 409, 'lease_lost');
        expect(lost.execution_id).toBe(id);
      }
      const after = (await get(`/v1/executions/${id}`)).body;
      expect(after).toEqual(before);
      expect(after.status).toBe('running');
      expect((await post(`/v1/executions/${id}/heartbeat`, { lease_token: task.lease_token })).status).toBe(200);
    });

    it('an unknown execution is 404 on every call; a bad id or body is 400', async () => {
      for (const [verb, body] of [
        ['heartbeat', { lease_token: 'ls_x' }],
        ['complete', { lease_token: 'ls_x', status: 'succeeded' }],
        ['release', { lease_token: 'ls_x' }],
        ['cancel', undefined],
      ] as const) {
        refused(await post(`/v1/executions/ex_doesnotexist/${verb}`, body), 404, 'not_found');
        expect(refused(await post(`/v1/executions/not.an.id/${verb}`, body), 400, 'validation_error').message).toContain('params.id');
      }
      expect(refused(await post('/v1/executions/ex_x/heartbeat', {}), 400, 'validation_error').message).toContain('body.lease_token');
      expect(refused(await post('/v1/executions/ex_x/heartbeat', { lease_token: 'a\u0000' }), 400, 'validation_error').message).toContain(
        'body.lease_token',
      );
      expect(
        refused(await post('/v1/executions/ex_x/complete', { lease_token: 't', status: 'done' }), 400, 'validation_error').message,
      ).toContain('body.status');
      expect(
        refused(
          await post('/v1/executions/ex_x/complete', { lease_token: 't', status: 'failed', error: { message: 1 } }),
          400,
          'validation_error',
        ).message,
      ).toContain('body.error.message');
      expect(
        refused(
          await post('/v1/executions/ex_x/complete', { lease_token: 't', status: 'succeeded', usage: { input_tokens: -1 } }),
          400,
          'validation_error',
        ).message,
      ).toContain('body.usage.input_tokens');
    });
  });

  describe('cancel', () => {
    it('cancels a queued execution at once', async () => {
      const agent = await newAgent();
      const id = await submit(agent);
      const r = await post(`/v1/executions/${id}/cancel`);
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ id, status: 'cancelled', error: { code: 'cancelled_by_user' } });
      // Cancelling again answers the same row.
      expect((await post(`/v1/executions/${id}/cancel`)).body.status).toBe('cancelled');
      expect((await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0 })).status).toBe(204);
    });

    it('asks a running execution to stop; the worker learns it from its heartbeat', async () => {
      const agent = await newAgent();
      const id = await submit(agent);
      const task = await claimOne(agent);
      const r = await post(`/v1/executions/${id}/cancel`);
      expect(r.status).toBe(200);
      expect(r.body.status).toBe('running');
      expect(r.body.cancel_requested_at).toEqual(expect.any(String));
      const hb = await post(`/v1/executions/${id}/heartbeat`, { lease_token: task.lease_token });
      expect(hb.status).toBe(200);
      expect(hb.body.cancel_requested).toBe(true);
      const done = await post(`/v1/executions/${id}/complete`, { lease_token: task.lease_token, status: 'cancelled' });
      expect(done.body.status).toBe('cancelled');
    });

    it('refuses to cancel a finished execution with 409 invalid_transition', async () => {
      const agent = await newAgent();
      const id = await submit(agent);
      const task = await claimOne(agent);
      await post(`/v1/executions/${id}/complete`, { lease_token: task.lease_token, status: 'succeeded' });
      const r = refused(await post(`/v1/executions/${id}/cancel`), 409, 'invalid_transition');
      expect(r).toMatchObject({ execution_id: id, status: 'succeeded' });
    });

    it('takes no body: `{}` is nothing, a field is a 400 naming it and changes nothing', async () => {
      const agent = await newAgent();
      const id = await submit(agent);
      const r = refused(await post(`/v1/executions/${id}/cancel`, { reason: 'late' }), 400, 'validation_error');
      expect(r.message).toContain('reason');
      expect((await get(`/v1/executions/${id}`)).body.status).toBe('queued');
      // The same on a DELETE and on the other bodiless routes.
      expect(refused(await call('DELETE', `/v1/agents/${agent}`, { body: { force: true } }), 400, 'validation_error').message).toContain(
        'force',
      );
      expect((await get(`/v1/agents/${agent}`)).status).toBe(200);
      const ok = await post(`/v1/executions/${id}/cancel`, {});
      expect(ok.status).toBe(200);
      expect(ok.body.status).toBe('cancelled');
    });
  });

  describe('reading executions', () => {
    it('filters by agent and status and pages with a cursor, every row exactly once', async () => {
      const agent = await newAgent({ max_parallel: 1 });
      const other = await newAgent();
      await submit(other);
      const ids: string[] = [];
      for (let i = 0; i < 7; i++) ids.push(await submit(agent, { message: `m${i}` }));
      const running = (await claimOne(agent)).execution_id;
      const cancelled = ids.find((id) => id !== running)!;
      await post(`/v1/executions/${cancelled}/cancel`);

      const all = await get(`/v1/executions?agent=${agent}`);
      expect(all.status).toBe(200);
      expect(all.body.executions.map((e: any) => e.id).sort()).toEqual([...ids].sort());
      expect(all.body.next_cursor).toBeNull();
      // Newest first.
      const created = all.body.executions.map((e: any) => Date.parse(e.created_at));
      expect(created).toEqual([...created].sort((a, b) => b - a));

      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const page: Answer = await get(`/v1/executions?agent=${agent}&limit=3${cursor ? `&cursor=${cursor}` : ''}`);
        expect(page.status).toBe(200);
        expect(page.body.executions.length).toBeLessThanOrEqual(3);
        seen.push(...page.body.executions.map((e: any) => e.id));
        cursor = page.body.next_cursor;
        pages++;
      } while (cursor && pages < 10);
      expect(pages).toBe(3);
      expect(seen).toHaveLength(7);
      expect(new Set(seen).size).toBe(7);
      expect([...seen].sort()).toEqual([...ids].sort());

      const one = await get(`/v1/executions?agent=${agent}&status=running`);
      expect(one.body.executions.map((e: any) => e.id)).toEqual([running]);
      const two = await get(`/v1/executions?agent=${agent}&status=running,cancelled`);
      expect(two.body.executions.map((e: any) => e.id).sort()).toEqual([running, cancelled].sort());
      const queued = await get(`/v1/executions?agent=${agent}&status=queued`);
      expect(queued.body.executions).toHaveLength(5);
      expect(queued.body.executions.every((e: any) => e.status === 'queued' && e.agent === agent)).toBe(true);
      const none = await get(`/v1/executions?agent=${agent}&status=succeeded`);
      expect(none.body).toEqual({ executions: [], next_cursor: null });

      const since = await get(`/v1/executions?agent=${agent}&since=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`);
      expect(since.body.executions).toEqual([]);

      // Several statuses are merged from one seek each: a cursor walk still sees every row once.
      const walked: string[] = [];
      cursor = null;
      pages = 0;
      do {
        const page: Answer = await get(
          `/v1/executions?agent=${agent}&status=queued,cancelled,running&limit=2${cursor ? `&cursor=${cursor}` : ''}`,
        );
        expect(page.status).toBe(200);
        const at = page.body.executions.map((e: any) => Date.parse(e.created_at));
        expect(at).toEqual([...at].sort((a, b) => b - a));
        walked.push(...page.body.executions.map((e: any) => e.id));
        cursor = page.body.next_cursor;
        pages++;
      } while (cursor && pages < 10);
      expect(walked).toHaveLength(7);
      expect([...walked].sort()).toEqual([...ids].sort());
    });

    it('lists carry previews, never bodies: a page over multi-MiB results stays small; the single read is whole', async () => {
      const agent = await newAgent({ max_parallel: 3 });
      const big = 'x'.repeat(3.9 * 1024 * 1024);
      // 250 characters outside the BMP: a preview cuts at 200 characters, not 200 UTF-16 units.
      const message = '🦊'.repeat(250);
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push(await submit(agent, { message, payload: { blob: 'p'.repeat(200 * 1024) } }));
      for (let i = 0; i < 3; i++) {
        const task = await claimOne(agent);
        const done =
          i < 2
            ? await post(`/v1/executions/${task.execution_id}/complete`, {
                lease_token: task.lease_token,
                status: 'succeeded',
                result: { big },
              })
            : await post(`/v1/executions/${task.execution_id}/complete`, {
                lease_token: task.lease_token,
                status: 'failed',
                error: { code: 'boom', message: 'e'.repeat(5000) },
                result: 'short',
              });
        expect(done.status).toBe(200);
      }
      const page = await get(`/v1/executions?agent=${agent}&limit=200`);
      expect(page.status).toBe(200);
      expect(page.text.length).toBeLessThan(16 * 1024);
      expect(page.body.executions).toHaveLength(3);
      for (const e of page.body.executions) {
        expect(e).not.toHaveProperty('payload');
        expect(e).not.toHaveProperty('result');
        expect(Array.from(e.message as string)).toHaveLength(201);
        expect(e.message).toBe('🦊'.repeat(200) + '…');
        expect(e.payload_preview).toBe(JSON.stringify({ blob: 'p'.repeat(200 * 1024) }).slice(0, 200) + '…');
      }
      const failed = page.body.executions.find((e: any) => e.status === 'failed');
      expect(failed.result_preview).toBe('"short"');
      expect(failed.error).toEqual({ code: 'boom', message: 'e'.repeat(200) + '…' });
      const ok = page.body.executions.find((e: any) => e.status === 'succeeded');
      expect(ok.result_preview).toBe(JSON.stringify({ big }).slice(0, 200) + '…');
      // Several statuses (one seek each, merged) carry the same previews.
      const merged = await get(`/v1/executions?agent=${agent}&status=succeeded,failed`);
      expect(merged.text.length).toBeLessThan(16 * 1024);
      expect(merged.body.executions.map((e: any) => e.id).sort()).toEqual([...ids].sort());

      const whole = await get(`/v1/executions/${ok.id}`);
      expect(whole.body.result.big).toHaveLength(big.length);
      expect(whole.body.message).toBe(message);
      expect(whole.body.payload.blob).toHaveLength(200 * 1024);
    });

    it.each([
      ['status=exploded', 'querystring.status'],
      ['limit=0', 'querystring.limit'],
      ['limit=201', 'querystring.limit'],
      ['limit=ten', 'querystring.limit'],
      ['agent=Bad_Agent', 'querystring.agent'],
      ['since=yesterday', 'querystring.since'],
      ['cursor=%25%25%25', 'querystring.cursor'],
      // A well-formed cursor with a timestamp no database column can hold.
      [`cursor=${Buffer.from('99999999999999999999999:ex_a').toString('base64url')}`, 'querystring.cursor'],
      ['colour=blue', 'colour'],
    ])('refuses the query %s naming %s', async (qs, field) => {
      expect(refused(await get(`/v1/executions?${qs}`), 400, 'validation_error').message).toContain(field);
    });

    it('reads one execution with its event timeline', async () => {
      const agent = await newAgent();
      const id = await submit(agent);
      const task = await claimOne(agent);
      await post(`/v1/executions/${id}/complete`, { lease_token: task.lease_token, status: 'succeeded' });
      const r = await get(`/v1/executions/${id}`);
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ id, agent, status: 'succeeded', attempt: 1 });
      expect(r.body.events.map((e: any) => [e.from, e.to])).toEqual([
        [null, 'queued'],
        ['queued', 'running'],
        ['running', 'succeeded'],
      ]);
      for (const e of r.body.events) {
        expect(e).toEqual({
          id: expect.any(Number),
          from: e.from,
          to: e.to,
          at: expect.any(String),
          actor: expect.any(String),
          reason: e.reason,
          attempt: expect.any(Number),
        });
      }
      refused(await get('/v1/executions/ex_doesnotexist'), 404, 'not_found');
      expect(refused(await get('/v1/executions/has%20space'), 400, 'validation_error').message).toContain('params.id');
    });
  });

  it('lists agents a page at a time in name order; an agent-scoped key sees only its own', async () => {
    const names = [await newAgent(), await newAgent(), await newAgent()];
    await submit(names[1]!);
    const all: any[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: Answer = await get(`/v1/agents?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(page.status).toBe(200);
      expect(page.body.agents.length).toBeLessThanOrEqual(2);
      all.push(...page.body.agents);
      cursor = page.body.next_cursor;
      pages++;
    } while (cursor);
    const listed = all.map((a) => a.name);
    expect(listed).toEqual([...listed].sort());
    expect(new Set(listed).size).toBe(listed.length);
    expect(listed).toEqual(expect.arrayContaining(names));
    expect(pages).toBeGreaterThan(1);
    expect(all.find((a) => a.name === names[1])).toMatchObject({ queued: 1, running: 0 });
    refused(await get('/v1/agents?limit=501'), 400, 'validation_error');
    refused(await get('/v1/agents?cursor=%%%'), 400, 'validation_error');
    const k = await createKey({ name: 'lister', scope: 'agent', agent: names[2]! });
    expect((await get('/v1/agents', k.key)).body).toEqual({ agents: [expect.objectContaining({ name: names[2] })], next_cursor: null });
  });

  describe('agent-scoped keys', () => {
    it('run the worker protocol for their own agent only', async () => {
      const mine = await newAgent({ max_parallel: 3 });
      const theirs = await newAgent();
      const k = await createKey({ name: 'worker', scope: 'agent', agent: mine });
      expect(k).toMatchObject({ scope: 'agent', agent: mine });
      expect(k.key).toMatch(/^bt_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/);

      const ids = [await submit(mine), await submit(mine), await submit(mine)];
      const theirId = await submit(theirs);
      const theirTask = await claimOne(theirs);

      const claimed = await post(`/v1/agents/${mine}/claim`, { wait_seconds: 0, max: 3 }, k.key);
      expect(claimed.status).toBe(200);
      const tasks = new Map<string, string>(claimed.body.tasks.map((t: any) => [t.execution_id, t.lease_token]));
      expect([...tasks.keys()].sort()).toEqual([...ids].sort());
      expect((await post(`/v1/agents/${mine}/claim`, { wait_seconds: 0 }, k.key)).status).toBe(204);

      expect((await post(`/v1/executions/${ids[0]}/heartbeat`, { lease_token: tasks.get(ids[0]!) }, k.key)).status).toBe(200);
      expect(
        (await post(`/v1/executions/${ids[0]}/complete`, { lease_token: tasks.get(ids[0]!), status: 'succeeded' }, k.key)).body.status,
      ).toBe('succeeded');
      expect((await post(`/v1/executions/${ids[1]}/release`, { lease_token: tasks.get(ids[1]!) }, k.key)).body.status).toBe('queued');

      // Another agent's work: forbidden to claim, invisible to the lease calls.
      refused(await post(`/v1/agents/${theirs}/claim`, { wait_seconds: 0 }, k.key), 403, 'forbidden');
      refused(await post(`/v1/executions/${theirId}/heartbeat`, { lease_token: theirTask.lease_token }, k.key), 404, 'not_found');
      refused(
        await post(`/v1/executions/${theirId}/complete`, { lease_token: theirTask.lease_token, status: 'failed' }, k.key),
        404,
        'not_found',
      );
      refused(await post(`/v1/executions/${theirId}/release`, { lease_token: theirTask.lease_token }, k.key), 404, 'not_found');
      expect((await get(`/v1/executions/${theirId}`)).body).toMatchObject({
        status: 'running',
        lease_expires_at: theirTask.lease_expires_at,
      });

      // Reads: its own agent only.
      const agents = await get('/v1/agents', k.key);
      expect(agents.status).toBe(200);
      expect(agents.body.agents.map((a: any) => a.name)).toEqual([mine]);
      expect((await get(`/v1/agents/${mine}`, k.key)).status).toBe(200);
      refused(await get(`/v1/agents/${theirs}`, k.key), 403, 'forbidden');

      // Admin routes.
      refused(await post('/v1/agents', { name: `agent-${++n}` }, k.key), 403, 'forbidden');
      refused(await call('PATCH', `/v1/agents/${mine}`, { body: { max_parallel: 9 }, key: k.key }), 403, 'forbidden');
      refused(await call('DELETE', `/v1/agents/${mine}`, { key: k.key }), 403, 'forbidden');
      refused(await post(`/v1/agents/${mine}/executions`, { message: 'm' }, k.key), 403, 'forbidden');
      refused(await get('/v1/executions', k.key), 403, 'forbidden');
      refused(await get(`/v1/executions/${ids[0]}`, k.key), 403, 'forbidden');
      refused(await post(`/v1/executions/${ids[2]}/cancel`, undefined, k.key), 403, 'forbidden');
      refused(await post('/v1/keys', { name: 'escalate', scope: 'admin' }, k.key), 403, 'forbidden');
      refused(await get('/v1/keys', k.key), 403, 'forbidden');
      refused(await call('DELETE', `/v1/keys/${k.id}`, { key: k.key }), 403, 'forbidden');
      expect((await get(`/v1/agents/${mine}`)).body.max_parallel).toBe(3);
    });

    it('are refused without an agent, or for an unknown agent', async () => {
      expect(refused(await post('/v1/keys', { name: 'w', scope: 'agent' }), 400, 'validation_error').message).toContain('body.agent');
      expect(refused(await post('/v1/keys', { name: 'w', scope: 'admin', agent: 'x' }), 400, 'validation_error').message).toContain(
        'body.agent',
      );
      refused(await post('/v1/keys', { name: 'w', scope: 'agent', agent: 'no-such-agent' }), 404, 'not_found');
      expect(refused(await post('/v1/keys', { name: 'w', scope: 'root' }), 400, 'validation_error').message).toContain('body.scope');
      expect(refused(await post('/v1/keys', { name: '', scope: 'admin' }), 400, 'validation_error').message).toContain('body.name');
      expect(refused(await post('/v1/keys', { name: 'a\u0000', scope: 'admin' }), 400, 'validation_error').message).toContain('body.name');
    });
  });

  describe('secrets', () => {
    it('GET /v1/keys lists keys without any secret', async () => {
      const k = await createKey({ name: 'listed', scope: 'admin' });
      const r = await get('/v1/keys');
      expect(r.status).toBe(200);
      const listed = r.body.keys.find((x: any) => x.id === k.id);
      expect(listed).toEqual({ id: k.id, name: 'listed', scope: 'admin', agent: null, created_at: expect.any(String), revoked_at: null });
      for (const key of r.body.keys) {
        expect(key).not.toHaveProperty('key');
        expect(key).not.toHaveProperty('secret_hash');
        expect(key).not.toHaveProperty('secret');
      }
    });

    it('no answer in this file carried a key secret, except the creation answer', async () => {
      expect(answers.length).toBeGreaterThan(100);
      expect(secrets.length).toBeGreaterThan(3);
      for (const a of answers) {
        const creation = a.method === 'POST' && a.url === '/v1/keys' && a.status === 201;
        const leaked = secrets.filter((s) => a.text.includes(s));
        if (creation) expect(leaked).toHaveLength(1);
        else expect(leaked, `${a.method} ${a.url} ${a.status}`).toEqual([]);
        expect(a.text).not.toContain('secret_hash');
      }
    });
  });
});
