import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../../src/api/server.ts';
import { KeyStore } from '../../src/auth/keys.ts';
import { Engine } from '../../src/engine/engine.ts';
import { createNodeMetrics } from '../../src/metrics.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

// Concurrency keys over HTTP: the submit's key options, the agent's per-key settings, the live
// keys read and its gauge; bad input is a 400 naming the field.

const clock = manualClock(Date.UTC(2026, 0, 1, 12, 0));
let ts: TestStore;
let engine: Engine;
let app: FastifyInstance;
let admin: string;

async function call(method: 'GET' | 'POST' | 'PATCH', url: string, payload?: unknown) {
  const res = await app.inject({ method, url, payload: payload as never, headers: { authorization: `Bearer ${admin}` } });
  return { status: res.statusCode, body: JSON.parse(res.body) };
}

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'flow-keys-api-test', clock });
  const keys = new KeyStore(ts.store);
  app = await buildServer({ engine, keys, logger: false });
  admin = (await keys.create({ name: 'admin', scope: 'admin' }, 'test')).key;
});
afterAll(async () => {
  await app?.close();
  engine?.close();
  await ts?.cleanup();
});

describe(`concurrency keys over HTTP (${STORE_KIND})`, () => {
  it('takes per-key settings on an agent and shows them', async () => {
    const made = await call('POST', '/v1/agents', {
      name: 'tenants',
      max_parallel: 10,
      key_max_parallel: 1,
      key_overrides: { 'user:big': 3 },
      key_throttle: { limit: 5, period_seconds: 60 },
    });
    expect(made.status).toBe(201);
    expect(made.body.keys).toEqual({
      key_max_parallel: 1,
      key_overrides: { 'user:big': 3 },
      key_throttle: { limit: 5, period_seconds: 60, burst: 0 },
    });
    const patched = await call('PATCH', '/v1/agents/tenants', { key_throttle: null });
    expect(patched.body.keys.key_throttle).toBeNull();
  });

  it('refuses bad key input with a 400 naming the field', async () => {
    for (const [body, field] of [
      [{ message: 'x', key: 'a'.repeat(201) }, 'key'],
      [{ message: 'x', key: 'has space' }, 'key'],
      [{ message: 'x', key: '' }, 'key'],
      [{ message: 'x', debounce_seconds: 5 }, 'debounce_seconds'],
      [{ message: 'x', key: 'k', debounce_seconds: 0 }, 'debounce_seconds'],
      [{ message: 'x', key: 'k', debounce_seconds: 3601 }, 'debounce_seconds'],
      [{ message: 'x', singleton: true }, 'singleton'],
    ] as const) {
      const res = await call('POST', '/v1/agents/tenants/executions', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error).toBe('validation_error');
      expect(res.body.message).toContain(field);
    }
    const bad = await call('PATCH', '/v1/agents/tenants', { key_throttle: { limit: 0, period_seconds: 60 } });
    expect([bad.status, bad.body.message]).toEqual([400, expect.stringContaining('key_throttle')]);
    const cap = await call('PATCH', '/v1/agents/tenants', { key_overrides: { 'bad key': 2 } });
    expect([cap.status, cap.body.message]).toEqual([400, expect.stringContaining('key_overrides')]);
  });

  it('submits with a key, folds a debounced burst, refuses a live singleton with 409 naming it', async () => {
    const one = await call('POST', '/v1/agents/tenants/executions', { message: 'a', key: 'user:1' });
    expect(one.status).toBe(201);
    expect(one.body.execution.key).toBe('user:1');
    expect(one.body.debounced).toBeUndefined();

    const first = await call('POST', '/v1/agents/tenants/executions', { message: 'd1', key: 'doc:9', debounce_seconds: 30 });
    const second = await call('POST', '/v1/agents/tenants/executions', { message: 'd2', key: 'doc:9', debounce_seconds: 30 });
    expect(second.status).toBe(201);
    expect(second.body).toMatchObject({ execution_id: first.body.execution_id, debounced: true });
    expect(second.body.execution.message).toBe('d2');

    const refused = await call('POST', '/v1/agents/tenants/executions', { message: 's', key: 'user:1', singleton: true });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ error: 'already_running', execution_id: one.body.execution_id });
    expect(refused.body.message).toContain(one.body.execution_id);
  });

  it('reads the live keys, paged in key order, and counts them in /metrics', async () => {
    await engine.claim('tenants', { owner: 'w', max: 10 });
    const page = await call('GET', '/v1/agents/tenants/keys?limit=1');
    expect(page.status).toBe(200);
    expect(page.body.keys).toEqual([{ key: 'doc:9', running: 0, queued: 1, max_parallel: 1, throttled_until: null }]);
    const rest = await call('GET', `/v1/agents/tenants/keys?cursor=${encodeURIComponent(page.body.next_cursor)}`);
    expect(rest.body).toMatchObject({ keys: [{ key: 'user:1', running: 1, queued: 0, max_parallel: 1 }], next_cursor: null });
    expect((await call('GET', '/v1/agents/nobody/keys')).status).toBe(404);
    expect((await call('GET', '/v1/agents/tenants/keys?limit=0')).status).toBe(400);
    const metrics = createNodeMetrics(engine);
    try {
      expect((await metrics.render()).body).toContain('baton_agent_live_keys{agent="tenants"} 2');
    } finally {
      metrics.close();
    }
  });
  it('takes a key per batch item, with the same validation and the same keyed admission as a single submit', async () => {
    await call('POST', '/v1/agents', { name: 'batched', max_parallel: 10, key_max_parallel: 1 });
    const items = [{ message: 'b1', key: 'user:1' }, { message: 'b2', key: 'user:1' }, { message: 'b3', key: 'user:2' }, { message: 'b4' }];
    const res = await call('POST', '/v1/agents/batched/executions/batch', { items });
    expect([res.status, res.body.created], JSON.stringify(res.body)).toEqual([200, 4]);
    const ids = (res.body.items as Array<{ execution_id: string }>).map((i) => i.execution_id);
    const keys = await Promise.all(ids.map(async (id) => (await call('GET', `/v1/executions/${id}`)).body.key));
    expect(keys).toEqual(['user:1', 'user:1', 'user:2', null]);
    // One seat per key: the second user:1 task waits on its key, as if submitted alone.
    const claimed = await engine.claim('batched', { owner: 'w', max: 10 });
    expect(claimed.map((r) => r.id).sort()).toEqual([ids[0], ids[2], ids[3]].sort());
    const waiting = await call('GET', `/v1/executions/${ids[1]}`);
    expect(waiting.body.waiting.reason).toBe('key_busy');

    for (const [item, field] of [
      [{ message: 'x', key: 'has space' }, 'key'],
      [{ message: 'x', key: '' }, 'key'],
      [{ message: 'x', key: 'k', debounce_seconds: 5 }, 'debounce_seconds'],
      [{ message: 'x', key: 'k', singleton: true }, 'singleton'],
    ] as const) {
      const bad = await call('POST', '/v1/agents/batched/executions/batch', { items: [{ message: 'fine' }, item] });
      expect(bad.status, JSON.stringify(item)).toBe(400);
      expect(bad.body.error).toBe('validation_error');
      expect(bad.body.message).toMatch(new RegExp(`items\\.1.*${field}`));
    }
    // Refused whole: nothing of a refused batch was written.
    expect((await call('GET', '/v1/agents/batched/keys')).body.keys).toHaveLength(2);
    // The engine refuses them too (a caller that skips the HTTP schema).
    await expect(engine.submitMany('batched', [{ message: 'x', key: 'k', singleton: true }], 'test')).rejects.toThrow(
      /items\.0\.singleton/,
    );
  });
});
