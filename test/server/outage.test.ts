/**
 * A database outage is weather: while PostgreSQL is away the API answers 503 `unavailable` with
 * Retry-After and writes nothing, /readyz says not ready, a worker started meanwhile waits
 * instead of exiting, and everything carries on when the database is back. The outage is real:
 * the server reaches PostgreSQL through a TCP proxy that the test cuts (every connection dies,
 * new ones are refused) and restores. SQLite is a file inside the process and has no outage of
 * this kind; its codes are covered by the classification test at the end.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError, BatonClient } from '../../src/client.ts';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { isStoreFull, isStoreUnavailable } from '../../src/store/unavailable.ts';
import { createWorker, type WorkerEvent } from '../../src/worker/sdk.ts';
import { until } from '../helpers/delivery.ts';
import { startProxy, type Proxy } from '../helpers/proxy.ts';
import { openTestStore, PG_URL, STORE_KIND, type TestStore } from '../helpers/store.ts';

/** Tests that need a database reached over the network, which can go away. */
const describeNetworkStore = STORE_KIND === 'postgres' ? describe : describe.skip;

describeNetworkStore('a PostgreSQL outage', () => {
  let ts: TestStore;
  let proxy: Proxy;
  let node: BatonNode;
  let api: BatonClient;
  let key: string;

  beforeAll(async () => {
    ts = await openTestStore();
    const target = new URL(PG_URL);
    proxy = await startProxy({ host: target.hostname, port: Number(target.port || 5432) });
    const viaProxy = new URL(PG_URL);
    viaProxy.port = String(proxy.port);
    node = await startNode({
      env: { dataDir: ts.location.dataDir, databaseUrl: viaProxy.toString(), pgSchema: ts.location.schema, port: 0, host: '127.0.0.1' },
      logger: false,
      canaryIntervalMs: 0,
      dispatcher: false,
    });
    key = node.createdAdminKey!;
    api = new BatonClient({ server: node.url, key });
    await api.createAgent({ name: 'weather' });
  });
  afterAll(async () => {
    await proxy?.up().catch(() => undefined);
    await node?.stop();
    await proxy?.close();
    await ts?.cleanup();
  });

  const raw = (path: string, init?: RequestInit) =>
    fetch(node.url + path, { ...init, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...init?.headers } });

  it('answers 503 unavailable with Retry-After, writes nothing, and recovers by itself', async () => {
    const before = await api.submit('weather', { message: 'before' });
    await proxy.down();

    const submit = await raw('/v1/agents/weather/executions', {
      method: 'POST',
      body: JSON.stringify({ message: 'during' }),
      headers: { 'idempotency-key': 'k-1' },
    });
    expect(submit.status).toBe(503);
    expect(submit.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(await submit.json()).toMatchObject({ error: 'unavailable' });
    for (const path of ['/v1/agents', `/v1/executions/${before.execution_id}`]) {
      const r = await raw(path);
      expect(r.status, path).toBe(503);
      expect((await r.json()).error).toBe('unavailable');
    }
    const ready = await fetch(node.url + '/readyz');
    expect(ready.status).toBe(503);
    expect((await fetch(node.url + '/healthz')).status).toBe(200);

    await proxy.up();
    // The same idempotency key works after the outage: the failed attempt held nothing.
    const after = await until('the API answers again', async () => {
      const r = await raw('/v1/agents/weather/executions', {
        method: 'POST',
        body: JSON.stringify({ message: 'during' }),
        headers: { 'idempotency-key': 'k-1' },
      });
      return r.status === 201 ? r.json() : undefined;
    });
    expect(after.status).toBe('queued');
    const listed = await api.listExecutions({ agent: 'weather' });
    expect(listed.executions.map((e) => e.message).sort()).toEqual(['before', 'during']);
    expect((await fetch(node.url + '/readyz')).status).toBe(200);
  });

  it('a worker started while the database is down waits, then serves', async () => {
    await proxy.down();
    const events: WorkerEvent[] = [];
    const handled: string[] = [];
    const worker = createWorker({
      server: node.url,
      key,
      agent: 'weather',
      concurrency: 2,
      claimWaitSeconds: 1,
      handler: (t) => {
        handled.push(t.executionId);
        return { ok: true };
      },
      onEvent: (e) => events.push(e),
    });
    let started = false;
    const starting = worker.start().then(() => (started = true));
    await until('the worker met the outage', () => events.some((e) => e.type === 'transport:error' && e.op === 'start'));
    expect(started).toBe(false);
    await proxy.up();
    await starting;
    expect(events.some((e) => e.type === 'transport:recovered' && e.op === 'start')).toBe(true);
    const queued = (await api.listExecutions({ agent: 'weather', status: 'queued' })).executions.map((e) => e.id);
    await until('queued tasks ran', () => queued.every((id) => handled.includes(id)));
    await worker.stop();
    for (const id of queued) expect((await api.getExecution(id)).status).toBe('succeeded');
  });

  it('a refused key is still fatal at start', async () => {
    const w = createWorker({ server: node.url, key: 'bt_0123456789abcdef_' + 'x'.repeat(43), agent: 'weather', handler: () => null });
    await expect(w.start()).rejects.toBeInstanceOf(ApiError);
  });
});

describe('what counts as the database being away', () => {
  it('classifies PostgreSQL, socket and SQLite errors, and nothing else', () => {
    const yes = [
      { code: '57P01' },
      { code: '57P03' },
      { code: '08006' },
      { code: '53300' },
      { code: 'ECONNREFUSED' },
      { code: 'ECONNRESET' },
      { message: 'Connection terminated unexpectedly' },
      { code: 'SQLITE_BUSY' },
      { code: 'SQLITE_FULL' },
      { code: 'SQLITE_IOERR_WRITE' },
      { code: 'SQLITE_READONLY' },
      new AggregateError([{ code: 'ECONNREFUSED' }]),
    ];
    const no = [
      { code: '23505' },
      { code: '40001' },
      { code: 'SQLITE_CONSTRAINT_CHECK' },
      { code: 'SQLITE_ERROR' },
      new Error('boom'),
      new TypeError('x is undefined'),
      null,
      'ECONNREFUSED',
    ];
    for (const e of yes) expect(isStoreUnavailable(e), JSON.stringify(e)).toBe(true);
    for (const e of no) expect(isStoreUnavailable(e), String(e)).toBe(false);
    // Of those, a full disk (readiness says store_full until a probe write commits).
    const full = [{ code: '53100' }, { code: 'SQLITE_FULL' }];
    for (const e of full) expect(isStoreFull(e) && isStoreUnavailable(e), JSON.stringify(e)).toBe(true);
    for (const e of [...yes.filter((e) => !full.some((f) => f.code === (e as { code?: string }).code)), ...no])
      expect(isStoreFull(e), String(JSON.stringify(e))).toBe(false);
  });
});
