/**
 * Pools over HTTP (zod, OpenAPI, errors naming the field), agents' `pools` and `throttle`, and the
 * pool gauges in /metrics, on both stores.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { createNodeMetrics } from '../../src/metrics.ts';
import { inProcessApi } from '../helpers/api.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'pools-api-test' });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

const api = inProcessApi(() => engine);
const { call } = api;

describe(`pools over HTTP (${STORE_KIND})`, () => {
  it('create, list, read with usage, update; agents draw from it and show their pools and throttle', async () => {
    const provider = { limits: [{ metric: 'total_tokens', window: 'minute', limit: 400_000 }] };
    const c = await call('POST', '/v1/pools', { name: 'provider', max_parallel: 20, budget: provider });
    expect(c.status).toBe(201);
    expect(c.body).toMatchObject({ name: 'provider', max_parallel: 20, throttle: null, budget: provider });
    expect((await call('POST', '/v1/pools', { name: 'provider' })).status).toBe(409);
    const a = await call('POST', '/v1/agents', {
      name: 'drafter',
      pools: ['provider'],
      throttle: { limit: 10, period_seconds: 60, burst: 2 },
    });
    expect(a.status).toBe(201);
    expect(a.body).toMatchObject({ pools: ['provider'], throttle: { limit: 10, period_seconds: 60, burst: 2 } });
    const list = await call('GET', '/v1/pools');
    expect(list.body.pools.map((p: { name: string }) => p.name)).toContain('provider');
    const u = await call('PATCH', '/v1/pools/provider', { throttle: { limit: 600, period_seconds: 60 } });
    expect(u.status).toBe(200);
    expect(u.body.throttle).toEqual({ limit: 600, period_seconds: 60, burst: 0 });
    const got = await call('GET', '/v1/pools/provider');
    expect(got.body).toMatchObject({ name: 'provider', agents: ['drafter'], in_use: 0, max_parallel: 20 });
    expect(got.body.budget_limits[0]).toMatchObject({ metric: 'total_tokens', window: 'minute', limit: 400_000, spent: 0 });
    // Removing the throttle and the pools through the agent.
    const cleared = await call('PATCH', '/v1/agents/drafter', { pools: [], throttle: null });
    expect(cleared.body).toMatchObject({ pools: [], throttle: null });
    expect((await call('GET', '/v1/pools/nope')).status).toBe(404);
  });

  it('refuses bad input naming the field: an unknown pool, a throttle of zero, a pool in use', async () => {
    await call('POST', '/v1/pools', { name: 'shared', max_parallel: 2 });
    const unknown = await call('POST', '/v1/agents', { name: 'lost', pools: ['no-such-pool'] });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toBe('validation_error');
    expect(unknown.body.message).toContain('pools');
    expect(unknown.body.message).toContain('no-such-pool');
    expect((await call('GET', '/v1/agents/lost')).status).toBe(404); // nothing was created
    const zero = await call('POST', '/v1/agents', { name: 'zero', throttle: { limit: 0, period_seconds: 60 } });
    expect(zero.status).toBe(400);
    expect(zero.body.message).toContain('throttle.limit');
    const zeroPool = await call('PATCH', '/v1/pools/shared', { throttle: { limit: 5, period_seconds: 0 } });
    expect(zeroPool.status).toBe(400);
    expect(zeroPool.body.message).toContain('throttle.period_seconds');
    await call('POST', '/v1/agents', { name: 'user-a', pools: ['shared'] });
    await call('POST', '/v1/agents', { name: 'user-b', pools: ['shared'] });
    const del = await call('DELETE', '/v1/pools/shared');
    expect(del.status).toBe(409);
    expect(del.body).toMatchObject({ error: 'pool_in_use', agents: ['user-a', 'user-b'] });
    expect(del.body.message).toContain('user-a');
    await call('PATCH', '/v1/agents/user-a', { pools: [] });
    await call('DELETE', '/v1/agents/user-b');
    expect((await call('DELETE', '/v1/pools/shared')).status).toBe(200);
    expect((await call('GET', '/v1/pools/shared')).status).toBe(404);
  });

  it('the OpenAPI document has the pool routes and the agent fields', async () => {
    const doc = JSON.parse((await api.app.inject({ method: 'GET', url: '/openapi.json' })).body);
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/v1/pools', '/v1/pools/{pool}']));
    expect(JSON.stringify(doc)).toContain('pool_budget_spent');
  });

  it('/metrics has seats in use and the cap per pool', async () => {
    await call('POST', '/v1/pools', { name: 'gauged', max_parallel: 3 });
    await call('POST', '/v1/agents', { name: 'gauged-agent', pools: ['gauged'], max_parallel: 5 });
    await engine.submit('gauged-agent', { message: 'x' }, 'test');
    await engine.claim('gauged-agent', { owner: 'w' });
    const metrics = createNodeMetrics(engine);
    try {
      const body = (await metrics.render()).body;
      expect(body).toContain('baton_pool_in_use{pool="gauged"} 1');
      expect(body).toContain('baton_pool_max_parallel{pool="gauged"} 3');
    } finally {
      metrics.close();
    }
  });
});
