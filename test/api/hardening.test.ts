/**
 * No client can stall or crash the server: trickled bodies time out, a refused request does not
 * wait for its body, one address cannot hold every connection, over-deep JSON is a 400 everywhere
 * a body comes in, so is a body of more values than one step may parse (413), numeric parameters
 * are bounded by their columns, and only JSON is accepted.
 * Real sockets against a real `baton up` on each store.
 */
import net from 'node:net';
import { Writable } from 'node:stream';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/client.ts';
import { interpret } from '../../src/delivery/dispatcher.ts';
import { jsonShape, jsonTooDeep, MAX_JSON_DEPTH, MAX_JSON_VALUES } from '../../src/domain/json.ts';
import { redactUrl } from '../../src/domain/urls.ts';
import { appendLogs, LOG_LIMITS } from '../../src/engine/logs.ts';
import { createLogger } from '../../src/server/logger.ts';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { startTestNode } from '../helpers/delivery.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const LIMITS = { requestTimeoutMs: 1_500, headersTimeoutMs: 1_000, maxConnectionsPerAddress: 40 };

let ts: TestStore;
let node: BatonNode;
let api: BatonClient;
let key: string;
let port: number;

beforeAll(async () => {
  ts = await openTestStore();
  ({ node, api, key } = await startTestNode(ts, { dispatcher: false, limits: LIMITS }));
  port = Number(new URL(node.url).port);
  await api.createAgent({ name: 'hard', max_parallel: 2 });
});
afterAll(async () => {
  await node?.stop();
  await ts?.cleanup();
});

/** A raw socket; resolves with everything the server sent once it closes the connection. */
function rawSocket(): { socket: net.Socket; closed: Promise<string>; connected: Promise<void> } {
  const socket = net.connect(port, '127.0.0.1');
  let got = '';
  socket.on('data', (d) => (got += d.toString()));
  socket.on('error', () => undefined);
  const closed = new Promise<string>((r) => socket.on('close', () => r(got)));
  const connected = new Promise<void>((r) => socket.once('connect', () => r()));
  return { socket, closed, connected };
}

const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
const auth = () => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
const post = (path: string, body: string, headers: Record<string, string> = auth()) =>
  fetch(node.url + path, { method: 'POST', headers, body });

describe(`slow and abusive clients (${STORE_KIND})`, () => {
  it('closes a connection that trickles its body past the request timeout, and keeps serving', async () => {
    const { socket, closed, connected } = rawSocket();
    await connected;
    socket.write(
      `POST /v1/agents/hard/executions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"message":"`,
    );
    const trickle = setInterval(() => socket.writable && socket.write('a'), 100);
    const started = Date.now();
    const answer = await closed;
    clearInterval(trickle);
    expect(answer).toMatch(/^HTTP\/1\.1 408/);
    expect(answer).toContain('{"error":"request_timeout","message":"the request did not arrive in time"}');
    // Cut by the timeout (1.5 s, checked every second), not by the 100 kB finishing.
    expect(Date.now() - started).toBeLessThan(10_000);
    expect((await fetch(node.url + '/healthz')).status).toBe(200);
  });

  it("answers what Node's HTTP parser refuses in the API's vocabulary, and closes the connection", async () => {
    for (const [request, status, error] of [
      ['GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n', 400, 'bad_request'],
      ['POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n', 400, 'bad_request'],
      [`GET /v1/agents?${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 431, 'headers_too_large'],
    ] as const) {
      const { socket, closed, connected } = rawSocket();
      await connected;
      socket.write(request);
      const answer = await closed;
      expect(answer, request.slice(0, 40)).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
      expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toEqual({ error, message: expect.any(String) });
    }
    expect((await fetch(node.url + '/healthz')).status).toBe(200);
  });

  it('does not cut a long-poll claim that waits longer than the request timeout', async () => {
    const started = Date.now();
    const r = await post('/v1/agents/hard/claim', JSON.stringify({ worker_id: 'w', wait_seconds: 3 }));
    expect(r.status).toBe(204);
    expect(Date.now() - started).toBeGreaterThanOrEqual(2_500);
  });

  it('answers a refused request without waiting for its body, and closes the connection', async () => {
    for (const [path, headers] of [
      ['/v1/agents/hard/executions', ''],
      ['/hooks/bwh_not-a-real-token', ''],
      ['/v1/agents/hard/executions', 'Authorization: Bearer bt_0123456789abcdef_wrongwrongwrongwrongwrongwrongwrongwrongwrong\r\n'],
    ] as const) {
      const { socket, closed, connected } = rawSocket();
      await connected;
      socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\n${headers}Content-Type: application/json\r\nContent-Length: 50000\r\n\r\n{`);
      const answer = await closed; // closed by the server: we never send the rest
      expect(answer, path).toMatch(/^HTTP\/1\.1 40[14]/);
      expect(answer.toLowerCase()).toContain('connection: close');
    }
  });

  it('caps open connections per address', async () => {
    const held = Array.from({ length: LIMITS.maxConnectionsPerAddress }, () => rawSocket());
    await Promise.all(held.map((h) => h.connected));
    await new Promise((r) => setTimeout(r, 100));
    const extra = rawSocket();
    await extra.closed; // destroyed on arrival
    for (const h of held) h.socket.destroy();
    await Promise.all(held.map((h) => h.closed));
    expect((await fetch(node.url + '/healthz')).status).toBe(200);
  });
});

describe(`bodies (${STORE_KIND})`, () => {
  it('refuses over-deep JSON with 400 on every body-taking route, writing nothing', async () => {
    const deep = `{"message":"m","payload":${nested(5000)}}`;
    const before = (await api.listExecutions({ agent: 'hard' })).executions.length;
    for (const [path, body] of [
      ['/v1/agents/hard/executions', deep],
      ['/v1/agents/hard/schedules', `{"name":"s","cron":"0 0 * * *","message":"m","payload":${nested(5000)}}`],
      ['/v1/agents', `{"name":"deep","retry_policy":${nested(4000)}}`],
    ]) {
      const r = await post(path!, body!);
      expect(r.status, path).toBe(400);
      const b = await r.json();
      expect(b.error).toBe('validation_error');
      expect(b.message).toMatch(/^body: JSON nested deeper than/);
    }
    expect((await api.listExecutions({ agent: 'hard' })).executions.length).toBe(before);
    expect((await api.listAgents()).map((a) => a.name)).not.toContain('deep');
    // Just inside the limit is fine.
    const ok = await post('/v1/agents/hard/executions', `{"message":"m","payload":${nested(MAX_JSON_DEPTH - 1)}}`);
    expect(ok.status).toBe(201);
  });

  it('a worker reporting an over-deep result gets 400 and keeps its lease; a sane report then lands', async () => {
    const { execution_id } = await api.submit('hard', { message: 'deep result' });
    const [task] = await api.claim('hard', { worker_id: 'w', wait_seconds: 1 });
    expect(task!.execution_id).toBeDefined();
    const bad = await post(
      `/v1/executions/${task!.execution_id}/complete`,
      `{"lease_token":"${task!.lease_token}","status":"succeeded","result":${nested(5000)}}`,
    );
    expect(bad.status).toBe(400);
    expect((await api.getExecution(task!.execution_id)).status).toBe('running');
    await api.complete(task!.execution_id, { lease_token: task!.lease_token, status: 'succeeded', result: { ok: true } });
    expect((await api.getExecution(task!.execution_id)).status).toBe('succeeded');
    expect(execution_id).toBeDefined();
  });

  it('a webhook delivery nested too deep is a 400 the sender will not retry, not a 503', async () => {
    const hook = await api.createWebhook({ name: 'deep', agent: 'hard', message: 'hook' } as never);
    const r = await fetch(node.url + hook.path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: nested(5000) });
    expect(r.status).toBe(400);
    expect((await r.json()).error).toBe('validation_error');
  });

  it('a push answer nested too deep, or of more values than one step may parse, fails the run with push_invalid_response', () => {
    const o = interpret({ status: 200, text: `{"status":"succeeded","result":${nested(5000)}}` });
    expect(o).toMatchObject({ status: 'failed', error: { code: 'push_invalid_response' } });
    // 1 + '{' + 2 ':' + 1 ',' + '[' + (n - 1) ',': n + 5 values.
    const wide = (n: number) => `{"status":"succeeded","result":[${Array(n).fill('1').join(',')}]}`;
    expect(interpret({ status: 200, text: wide(MAX_JSON_VALUES - 4) })).toMatchObject({
      status: 'failed',
      error: { code: 'push_invalid_response', message: expect.stringMatching(/^HTTP 200 but the body: about [\d,]+ JSON values/) },
    });
    expect(interpret({ status: 200, text: wide(MAX_JSON_VALUES - 5) })).toMatchObject({ status: 'succeeded' });
  });

  it('refuses a body of more JSON values than one step may parse with 413 naming the bound, writing nothing', async () => {
    // An object of n keys and n numbers: 2n + 1 values.
    const wide = (keys: number) => `{${Array.from({ length: keys }, (_, i) => `"k${i}":${i}`).join(',')}}`;
    await api.createAgent({ name: 'wide', max_backlog: 1000 });
    // 1,000 items of 130 keys each: ~265,000 values in ~2 MB, well inside the batch route's 8 MiB.
    const items = (keys: number) =>
      `{"items":[${Array.from({ length: 1000 }, () => `{"message":"m","payload":${wide(keys)}}`).join(',')}]}`;
    const over = await post('/v1/agents/wide/executions/batch', items(130));
    expect(over.status).toBe(413);
    const b = await over.json();
    expect(b.error).toBe('payload_too_large');
    expect(b.message).toMatch(/^body: about [\d,]+ JSON values \(keys included\), more than the 250,000/);
    expect((await api.listExecutions({ agent: 'wide' })).executions.length).toBe(0);
    // ~245,000 values: taken whole.
    const within = await post('/v1/agents/wide/executions/batch', items(120));
    expect(within.status).toBe(200);
    expect((await within.json()).created).toBe(1000);
    // A worker's result past the bound: refused, the lease kept; a report within it then lands.
    await api.createAgent({ name: 'wide-result' });
    const { execution_id } = await api.submit('wide-result', { message: 'wide result' });
    const [task] = await api.claim('wide-result', { worker_id: 'w', wait_seconds: 1 });
    expect(task!.execution_id).toBe(execution_id);
    const tooMany = await post(
      `/v1/executions/${execution_id}/complete`,
      `{"lease_token":"${task!.lease_token}","status":"succeeded","result":${wide(MAX_JSON_VALUES / 2)}}`,
    );
    expect(tooMany.status).toBe(413);
    expect((await tooMany.json()).error).toBe('payload_too_large');
    expect((await api.getExecution(execution_id)).status).toBe('running');
    await api.complete(execution_id, { lease_token: task!.lease_token, status: 'succeeded', result: 'x'.repeat(3_000_000) });
    expect((await api.getExecution(execution_id)).status).toBe('succeeded');
  });

  it('refuses a number too large for a double (it would be stored as null) on API bodies, webhooks and push answers', async () => {
    const r = await post('/v1/agents/hard/executions', '{"message":"m","payload":{"n":1e400}}');
    expect(r.status).toBe(400);
    expect(await r.json()).toEqual({
      error: 'validation_error',
      message: 'body: a number too large for a double (above 1.8e308, such as 1e400): it would be stored as null',
    });
    const hook = await api.createWebhook({ name: 'huge', agent: 'hard', message: 'hook' } as never);
    const h = await fetch(node.url + hook.path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '[1.5E+309]' });
    expect(h.status).toBe(400);
    expect(interpret({ status: 200, text: `{"result":${'9'.repeat(400)}}` })).toMatchObject({
      status: 'failed',
      error: { code: 'push_invalid_response' },
    });
    // At the edge, and in strings, numbers are as they were.
    expect(jsonShape('[1.7976931348623157e308, -1e308, 1e-400, "1e400", true, false]').infinite).toBe(false);
    expect(jsonShape(`[${'1'.repeat(308)}]`).infinite).toBe(false);
    expect(jsonShape(`[${'1'.repeat(310)}]`).infinite).toBe(true);
    expect((await post('/v1/agents/hard/executions', '{"message":"m","payload":{"n":1.7976931348623157e308}}')).status).toBe(201);
  });

  it('counts values as keys, scalars and containers outside strings', () => {
    expect(jsonShape('1').values).toBe(1);
    expect(jsonShape('{"a":1,"b":[2,3]}').values).toBe(7);
    expect(jsonShape('["a,b:c","{["]').values).toBe(3);
    // {"a\\":"\\",":":","}: escaped backslashes end their strings; the quoted ':' and ',' are text.
    expect(jsonShape(String.raw`{"a\\":"\\",":":","}`).values).toBe(5);
    expect(JSON.parse(String.raw`{"a\\":"\\",":":","}`)).toEqual({ 'a\\': '\\', ':': ',' });
  });

  it('shapes any JSON text as its parsed value says (strings with quotes and backslashes skipped whole)', () => {
    // The count jsonShape makes: one, plus per container one, a key per member and a separator
    // between members; the depth: containers inside containers.
    type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
    const count = (v: Json): number => {
      if (v === null || typeof v !== 'object') return 0;
      const members = Array.isArray(v) ? v : Object.values(v);
      const keys = Array.isArray(v) ? 0 : members.length;
      return 1 + keys + Math.max(0, members.length - 1) + members.reduce<number>((n, m) => n + count(m), 0);
    };
    const depth = (v: Json): number =>
      v === null || typeof v !== 'object' ? 0 : 1 + Math.max(0, ...(Array.isArray(v) ? v : Object.values(v)).map(depth));
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 6 }), fc.boolean(), fc.integer({ min: 0, max: 6 }), (value, spaced, limit) => {
        const v = value as Json;
        const text = JSON.stringify(v, null, spaced ? 2 : undefined);
        const shape = jsonShape(text, limit);
        expect(shape.tooDeep).toBe(depth(v) > limit);
        if (!shape.tooDeep) expect(shape.values).toBe(1 + count(v));
        expect(shape.infinite).toBe(false);
      }),
      { numRuns: 500 },
    );
    // Escape runs at a string's end: an even run ends it, an odd one escapes the quote.
    expect(jsonShape(String.raw`["\\\\", 1]`).values).toBe(3);
    // The quote is escaped: the string runs to the end, and only the bracket before it counts.
    expect(jsonShape(String.raw`["\\\", 1]`).values).toBe(2);
  });

  it('counts depth outside strings only', () => {
    expect(jsonTooDeep(`{"a":"${'['.repeat(500)}"}`)).toBe(false);
    expect(jsonTooDeep(`{"a":"\\"${'['.repeat(500)}"}`)).toBe(false);
    expect(jsonTooDeep(nested(MAX_JSON_DEPTH))).toBe(false);
    expect(jsonTooDeep(nested(MAX_JSON_DEPTH + 1))).toBe(true);
  });

  it('answers 415 for a body that is not JSON', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
      const r = await post('/v1/agents/hard/executions', 'message=hi', { authorization: `Bearer ${key}`, 'content-type': type });
      expect(r.status, type).toBe(415);
      expect(await r.json()).toEqual({
        error: 'unsupported_media_type',
        message: `body: send application/json (Content-Type was "${type}")`,
      });
    }
  });

  it('answers 415 for a compressed body, on the API and the webhook receiver, and reads none of it', async () => {
    const before = (await api.listAgents()).length;
    for (const encoding of ['gzip', 'br', 'GZIP ']) {
      const r = await post('/v1/agents', JSON.stringify({ name: 'zipped' }), { ...auth(), 'content-encoding': encoding });
      expect(r.status, encoding).toBe(415);
      expect(await r.json()).toEqual({
        error: 'unsupported_media_type',
        message: `body: send it uncompressed (Content-Encoding was "${encoding.trim().toLowerCase()}")`,
      });
    }
    const hook = await post('/hooks/whk_nonexistent', '{}', { 'content-type': 'application/json', 'content-encoding': 'gzip' });
    expect(hook.status).toBe(415);
    expect((await api.listAgents()).length).toBe(before);
    // identity is no encoding at all.
    const plain = await post('/v1/agents', JSON.stringify({ name: 'unzipped' }), { ...auth(), 'content-encoding': 'identity' });
    expect(plain.status).toBe(201);
  });

  it('bounds numeric query parameters by their columns (400, never a database error)', async () => {
    const { execution_id } = await api.submit('hard', { message: 'logs' });
    for (const after of ['2147483648', '99999999999999999999', '-1', '1.5', '0x10', '1e1', '%205', '']) {
      const r = await fetch(`${node.url}/v1/executions/${execution_id}/logs?after=${after}`, { headers: auth() });
      expect(r.status, after).toBe(400);
      const b = await r.json();
      expect(b.error).toBe('validation_error');
      expect(b.message).toContain('after');
    }
    const edge = await fetch(`${node.url}/v1/executions/${execution_id}/logs?after=2147483647`, { headers: auth() });
    expect(edge.status).toBe(200);
    // Out of range says so (not "decimal digits", which they are), once.
    for (const [query, said] of [
      ['after=2147483648', 'querystring.after: must be at most 2147483647'],
      ['after=99999999999999999999', 'querystring.after: must be at most 2147483647'],
    ]) {
      const r = await fetch(`${node.url}/v1/executions/${execution_id}/logs?${query}`, { headers: auth() });
      expect((await r.json()).message, query).toBe(said);
    }
    const zero = await fetch(`${node.url}/v1/executions?limit=0`, { headers: auth() });
    expect((await zero.json()).message).toBe('querystring.limit: must be at least 1');
    // Page sizes too: decimal digits only.
    for (const path of ['/v1/executions', '/v1/agents/hard/schedules', '/v1/canary/violations']) {
      const hex = await fetch(`${node.url}${path}?limit=0x10`, { headers: auth() });
      expect(hex.status, path).toBe(400);
      expect((await hex.json()).message).toMatch(/^querystring\.limit: must be a whole number in decimal digits/);
      expect((await fetch(`${node.url}${path}?limit=16`, { headers: auth() })).status, path).toBe(200);
    }
  });
});

describe('file modes', () => {
  it('creates the data directory 0700 and the SQLite database, WAL and SHM files 0600', async () => {
    const { mkdtempSync, statSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { openSqlite } = await import('../../src/store/sqlite.ts');
    const { KeyStore } = await import('../../src/auth/keys.ts');
    const root = mkdtempSync(join(tmpdir(), 'baton-modes-'));
    const dataDir = join(root, 'data');
    try {
      // The SQLite file and its companions exist on every machine, whatever store the suite runs.
      const store = openSqlite(join(dataDir, 'baton.sqlite'));
      await store.migrate();
      await new KeyStore(store).ensureBootstrapKey(dataDir);
      const mode = (p: string) => statSync(p).mode & 0o777;
      expect(mode(dataDir)).toBe(0o700);
      for (const f of ['baton.sqlite', 'baton.sqlite-wal', 'baton.sqlite-shm', 'admin.key']) expect(mode(join(dataDir, f)), f).toBe(0o600);
      await store.close();
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe(`rights (${STORE_KIND})`, () => {
  /** Read an SSE response until it ends; resolves with everything received. */
  async function readAll(res: Response): Promise<string> {
    const reader = res.body!.getReader();
    let text = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return text;
      text += new TextDecoder().decode(value);
    }
  }

  /** What an agent-scoped key may call (the worker protocol, reads of its own agent); every other route is admin-only. */
  const AGENT_KEY_ROUTES = [
    'GET /v1/agents',
    'GET /v1/agents/{agent}',
    'GET /v1/agents/{agent}/budget',
    'GET /v1/agents/{agent}/seats',
    'GET /v1/agents/{agent}/series',
    'POST /v1/agents/{agent}/claim',
    'POST /v1/claim',
    'POST /v1/claim/widen',
    'POST /v1/claim/withdraw',
    'POST /v1/executions/{id}/complete',
    'POST /v1/completions',
    'POST /v1/executions/{id}/heartbeat',
    'POST /v1/executions/{id}/release',
    'GET /v1/executions/{id}/logs',
    'POST /v1/executions/{id}/logs',
    'GET /v1/events',
  ];

  it('refuses an agent-scoped key on every other route with 403, before its body or query is checked', async () => {
    await api.createAgent({ name: 'scoped' });
    const { key: agentKey } = await api.createKey({ name: 'scoped-w', scope: 'agent', agent: 'scoped' });
    const spec = (await (await fetch(node.url + '/openapi.json')).json()) as { paths: Record<string, Record<string, unknown>> };
    const routes = Object.entries(spec.paths)
      .filter(([path]) => path.startsWith('/v1/'))
      .flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`));
    expect(routes.length).toBeGreaterThan(40);
    const open: string[] = [];
    for (const route of routes) {
      const [method, template] = route.split(' ') as [string, string];
      // The key's own agent and an execution that does not exist; a body and a query no route accepts.
      const path = template.replace('{agent}', 'scoped').replace(/\{[a-z_]+\}/g, 'ex_nonexistent');
      // HEAD stands in for GET on the event stream: the same route and rights, no stream left open.
      const res = await fetch(`${node.url}${path}?bogus=1`, {
        method: route === 'GET /v1/events' ? 'HEAD' : method,
        headers: { authorization: `Bearer ${agentKey}`, 'content-type': 'application/json' },
        body: method === 'GET' || method === 'DELETE' ? undefined : '{"bogus": 1}',
      });
      const text = await res.text();
      if (res.status === 403) expect(JSON.parse(text)).toMatchObject({ error: 'forbidden', message: expect.stringContaining('admin key') });
      else open.push(route);
    }
    expect(open.sort()).toEqual([...AGENT_KEY_ROUTES].sort());
    // The same requests with an admin key get past the check (here: to the query's own 400).
    const res = await fetch(`${node.url}/v1/keys?bogus=1`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: 'validation_error', message: expect.stringContaining('bogus') });
  });

  it('refuses a query parameter a route does not take, on every /v1 route that reads (400 naming it)', async () => {
    await api.createAgent({ name: 'q-agent' });
    const spec = (await (await fetch(node.url + '/openapi.json')).json()) as { paths: Record<string, Record<string, unknown>> };
    const reads = Object.entries(spec.paths)
      .filter(([path]) => path.startsWith('/v1/'))
      .flatMap(([path, ops]) => (['get', 'delete'] as const).filter((m) => m in ops).map((m) => [m.toUpperCase(), path] as const));
    expect(reads.length).toBeGreaterThan(20);
    for (const [method, template] of reads) {
      const path = template.replace('{agent}', 'q-agent').replace(/\{[a-z_]+\}/g, 'nonexistent');
      const res = await fetch(`${node.url}${path}?bogus=1`, { method, headers: { authorization: `Bearer ${key}` } });
      const body = await res.json();
      expect({ route: `${method} ${template}`, status: res.status, error: body.error }).toEqual({
        route: `${method} ${template}`,
        status: 400,
        error: 'validation_error',
      });
      expect(body.message).toContain('bogus');
    }
  });

  it("refuses an event stream of another agent's changes to an agent-scoped key (403), and of an unknown agent to anyone (404)", async () => {
    await api.createAgent({ name: 'ev-own' });
    await api.createAgent({ name: 'ev-other' });
    const { key: agentKey } = await api.createKey({ name: 'ev-w', scope: 'agent', agent: 'ev-own' });
    const events = (query: string, k: string, method = 'GET') =>
      fetch(`${node.url}/v1/events${query}`, { method, headers: { authorization: `Bearer ${k}` } });
    const other = await events('?agent=ev-other', agentKey);
    expect(other.status).toBe(403);
    expect(await other.json()).toMatchObject({ error: 'forbidden', message: expect.stringContaining("'ev-own', not 'ev-other'") });
    const unknown = await events('?agent=ev-nobody', key);
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ error: 'not_found', message: expect.stringContaining('ev-nobody') });
    expect((await events('?agent=ev-own', agentKey, 'HEAD')).status).toBe(200);
    expect((await events('?agent=ev-other', key, 'HEAD')).status).toBe(200);
  });

  it('deleting an agent revokes its keys: a re-created agent of the same name is not served to them', async () => {
    await api.createAgent({ name: 'gone' });
    const { key: agentKey } = await api.createKey({ name: 'w', scope: 'agent', agent: 'gone' });
    const asAgent = (path: string) => fetch(node.url + path, { headers: { authorization: `Bearer ${agentKey}` } });
    expect((await asAgent('/v1/agents/gone')).status).toBe(200);
    await api.deleteAgent('gone');
    await api.createAgent({ name: 'gone' });
    const r = await asAgent('/v1/agents/gone');
    expect(r.status).toBe(401);
    expect((await api.listKeys()).find((k) => k.name === 'w' && k.agent === 'gone')?.revoked_at).not.toBeNull();
  });

  it('a log follower that stops reading makes the server stop reading the log for it, and gets every line when it reads on', async () => {
    // 200 followers that never read a 5 MiB log took a server from 200 MB to 2.6 GB: each stream wrote the whole log into its socket's buffer.
    await api.createAgent({ name: 'long-log' });
    const { execution_id } = await api.submit('long-log', { message: 'a long log' });
    const [task] = await api.claim('long-log', { worker_id: 'w' });
    expect(task!.execution_id).toBe(execution_id);
    // 24 MB, past the 5 MiB a log keeps (written here with a wider bound): more than loopback's socket buffers take (~4 MB).
    const line = 'x'.repeat(16_000);
    const LINES = 1500;
    const wide = { ...LOG_LIMITS, maxLines: LINES, maxBytes: 64 * 1024 * 1024 };
    for (let i = 0; i < LINES; i += 100) {
      const lines = Array.from({ length: 100 }, (_, j) => ({ stream: 'stdout' as const, line: `${i + j} ${line}` }));
      await appendLogs(ts.store, execution_id, task!.lease_token, lines, Date.now(), wide);
    }
    let linesRead = 0;
    const read = node.engine.logs.read.bind(node.engine.logs);
    node.engine.logs.read = async (id, o) => {
      const page = await read(id, o);
      if (id === execution_id) linesRead += page.lines.length;
      return page;
    };
    try {
      const { socket, connected } = rawSocket();
      await connected;
      const chunks: Buffer[] = [];
      socket.on('data', (d: Buffer) => chunks.push(d));
      socket.pause(); // the client reads nothing: what the server sends waits in the socket buffers
      socket.write(`GET /v1/executions/${execution_id}/logs?follow=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`);
      await new Promise((r) => setTimeout(r, 1500));
      expect(linesRead, 'lines the server read for a client that reads nothing').toBeLessThan(LINES / 2);
      await api.complete(execution_id, { lease_token: task!.lease_token, status: 'succeeded' });
      socket.resume();
      // (The response ends with the stream; the connection is kept alive.)
      const ended = `event: end\ndata: ${JSON.stringify({ execution_id, status: 'succeeded', next_after: LINES })}`;
      for (let waited = 0; waited < 20_000 && !Buffer.concat(chunks).includes(ended); waited += 50)
        await new Promise((r) => setTimeout(r, 50));
      socket.destroy();
      const text = Buffer.concat(chunks).toString();
      expect(text.match(/\nevent: log\n/g)?.length).toBe(LINES);
      expect(text).toContain(ended);
    } finally {
      node.engine.logs.read = read;
    }
  });

  it('revoking a key ends the event and log streams it opened', async () => {
    const { key: k, id } = await api.createKey({ name: 'streams', scope: 'admin' });
    const { execution_id } = await api.submit('hard', { message: 'to follow' });
    const events = await fetch(`${node.url}/v1/events`, { headers: { authorization: `Bearer ${k}` } });
    const logs = await fetch(`${node.url}/v1/executions/${execution_id}/logs?follow=true`, { headers: { authorization: `Bearer ${k}` } });
    expect(events.status).toBe(200);
    expect(logs.status).toBe(200);
    const ended = Promise.all([readAll(events), readAll(logs)]);
    await new Promise((r) => setTimeout(r, 100));
    await api.revokeKey(id);
    const [e, l] = await ended; // both streams end: the test would time out otherwise
    for (const text of [e, l]) expect(text).toMatch(/event: error\ndata: \{"error":"unauthorized"/);
    expect((await fetch(`${node.url}/v1/events`, { headers: { authorization: `Bearer ${k}` } })).status).toBe(401);
  });

  it('shows an agent-scoped key its push URL without credentials; admins see it as stored', async () => {
    const url = 'http://user:hunter2@127.0.0.1:9/hook?token=abc123&x=1';
    await api.createAgent({ name: 'pushy', delivery: 'push', push_url: url });
    const { key: agentKey } = await api.createKey({ name: 'p', scope: 'agent', agent: 'pushy' });
    const seen = await (await fetch(`${node.url}/v1/agents/pushy`, { headers: { authorization: `Bearer ${agentKey}` } })).json();
    expect(seen.push_url).not.toContain('hunter2');
    expect(seen.push_url).not.toContain('abc123');
    expect(seen.push_url).toContain('127.0.0.1:9/hook');
    const listed = await (await fetch(`${node.url}/v1/agents`, { headers: { authorization: `Bearer ${agentKey}` } })).json();
    expect(JSON.stringify(listed)).not.toContain('hunter2');
    expect((await api.getAgent('pushy')).push_url).toBe(url);
  });

  it('takes out of a URL every part that may carry a credential, and keeps the rest', () => {
    const cases: Array<[string, string]> = [
      ['https://x/hook#access_token=SECRET2', 'https://x/hook#redacted'],
      ['https://x/hook?SECRET3', 'https://x/hook?redacted'],
      ['https://x/hook;jsessionid=SECRET5', 'https://x/hook;redacted'],
      ['https://discord.invalid/api/webhooks/123/Abc1defghijklmnopqrstuvwxyz0', 'https://discord.invalid/api/webhooks/123/redacted'],
      ['https://hooks.slack.invalid/services/T0/B0/XXXXXXXXXXXXXXXXXXXXXXX1', 'https://hooks.slack.invalid/services/T0/B0/redacted'],
      ['http://user:hunter2@127.0.0.1:9/hook?token=abc123&x=1', 'http://redacted:redacted@127.0.0.1:9/hook?token=redacted&x=redacted'],
      ['https://agent.example/v1/run-task', 'https://agent.example/v1/run-task'],
      ['not a url', '[redacted]'],
    ];
    for (const [url, seen] of cases) expect(redactUrl(url), url).toBe(seen);
  });
});

describe(`secrets are never stored (${STORE_KIND})`, () => {
  const samples = {
    admin: () => key,
    gho: () => 'gho_' + 'A1b2C3d4E5f6G7h8I9j0K1l2',
    pat: () => 'github_pat_' + '11ABCDEFG0123456789_abcdefghijklmnop',
    xoxp: () => 'xoxp-1234567890-0987654321-abcdef',
    asia: () => 'ASIA' + 'ABCDEFGHIJKLMNOP',
    bwh: () => 'bwh_' + 'x'.repeat(43),
    whsec: () => 'whsec_' + 'y'.repeat(43),
  };

  it('redacts usage, error code and message, and result reported by a worker, in every known shape', async () => {
    const { redactSecrets } = await import('../../src/domain/redact.ts');
    const { findSecret } = await import('../../src/domain/secrets.ts');
    for (const [name, make] of Object.entries(samples)) {
      const s = make();
      expect(findSecret(`x ${s} y`), name).toBeDefined();
      expect(redactSecrets(`x ${s} y`), name).not.toContain(s);
      expect(findSecret(redactSecrets(`x ${s} y`)), name).toBeUndefined();
    }
    await api.createAgent({ name: 'leaky' });
    const { execution_id } = await api.submit('leaky', { message: 'leaky' });
    const [task] = await api.claim('leaky', { worker_id: 'w', wait_seconds: 20 });
    expect(task!.execution_id).toBe(execution_id);
    const all = Object.values(samples)
      .map((f) => f())
      .join(' ');
    await api.complete(execution_id, {
      lease_token: task!.lease_token,
      status: 'failed',
      error: { code: samples.gho(), message: all },
      usage: { key: samples.admin(), tokens: 10, note: all } as never,
      result: { echo: all },
    });
    const row = await ts.store.db
      .selectFrom('executions')
      .select(['usage', 'error_code', 'error_message', 'result'])
      .where('id', '=', execution_id)
      .executeTakeFirstOrThrow();
    const stored = JSON.stringify(row);
    for (const [name, make] of Object.entries(samples)) expect(stored, name).not.toContain(make());
    expect(JSON.parse(row.usage!).tokens).toBe(10);
  });

  it('redacts through JSON text as the walk does: every secret anywhere in a value, whatever precedes it', async () => {
    const { redactJson, redactToJson } = await import('../../src/domain/redact.ts');
    const { ANY_SECRET_HEAD, findSecret } = await import('../../src/domain/secrets.ts');
    // What redactToJson's shortcut rests on: each pattern's match starts with a listed head.
    for (const [name, make] of Object.entries(samples)) expect(make().search(ANY_SECRET_HEAD), name).toBe(0);
    const secret = fc.constantFrom(...Object.values(samples).map((f) => f()));
    // A string holding a secret after any text (escapes, backslashes, quotes, unicode, another secret), or none.
    const before = fc.oneof(fc.string({ unit: 'binary' }), fc.constantFrom('\n', '\\', '\\n', '\\\n', '\u0001', '\ud800', 'x', '-', '"'));
    const text = fc.oneof(
      fc.string({ unit: 'binary' }),
      fc.tuple(before, secret, fc.oneof(fc.string(), secret)).map((p) => p.join('')),
    );
    const value = fc.letrec((tie) => ({
      v: fc.oneof({ depthSize: 'small' }, text, fc.integer(), fc.constant(null), fc.array(tie('v')), fc.dictionary(text, tie('v'))),
    })).v;
    const strings = (v: unknown): string[] =>
      typeof v === 'string'
        ? [v]
        : Array.isArray(v)
          ? v.flatMap(strings)
          : v && typeof v === 'object'
            ? Object.entries(v).flatMap(([k, x]) => [k, ...strings(x)])
            : [];
    fc.assert(
      fc.property(value, (v) => {
        // Equal once parsed: two keys redacted alike are one key walked, a repeated key in the text.
        const out = redactToJson(v);
        expect(JSON.parse(out)).toEqual(redactJson(v));
        for (const s of strings(JSON.parse(out))) expect(findSecret(s)).toBeUndefined();
      }),
      { numRuns: 1000 },
    );
  });

  it('answers a large result or payload as stored, and reads it back the same', async () => {
    await api.createAgent({ name: 'big-result', max_parallel: 2 });
    // Payloads past the size from which answers splice the stored text, with escapes, quotes and unicode.
    const payload = (k: number) => ({ k, rows: Array.from({ length: 2000 }, (_, i) => ({ i, s: `"p" \\ ü 😀 \t ${k}` })) });
    expect(JSON.stringify(payload(0)).length).toBeGreaterThan(64 * 1024);
    const { execution_id, execution: submitted } = await api.submit('big-result', { message: 'big', payload: payload(0) });
    expect(submitted.payload).toEqual(payload(0));
    for (const k of [1, 2]) await api.submit('big-result', { message: `next ${k}`, payload: payload(k) });
    const [task] = await api.claim('big-result', { worker_id: 'w', wait_seconds: 5 });
    expect(task!.payload).toEqual(payload(0));
    const [second] = await api.claim('big-result', { worker_id: 'w', wait_seconds: 5 });
    expect(second!.payload).toEqual(payload(1));
    await api.complete(second!.execution_id, { lease_token: second!.lease_token, status: 'succeeded' });
    // Past the size from which the answer splices the stored text: escapes, quotes, unicode, nesting.
    const result = { rows: Array.from({ length: 3000 }, (_, i) => ({ i, s: `"q" \\ é ✓ 😀 \n ${i}`, n: [i, null, true] })), tail: '}"]' };
    const done = await api.complete(execution_id, { lease_token: task!.lease_token, status: 'succeeded', result, claim: { max: 1 } });
    expect(done.result).toEqual(result);
    expect(done.status).toBe('succeeded');
    expect(done.tasks!.map((t) => t.payload)).toEqual([payload(2)]);
    const read = await api.getExecution(execution_id);
    expect(read.result).toEqual(result);
    expect(read.payload).toEqual(payload(0));
    expect(read.events.map((e) => e.to)).toEqual(['queued', 'running', 'succeeded']);
  });
});

/** A `baton up` of its own, on a store of its own, whose log lines (JSON) are kept. */
async function loggedNode(): Promise<{ node: BatonNode; lines: string[]; stop(): Promise<void> }> {
  const own = await openTestStore();
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk, _enc, done) {
      lines.push(...String(chunk).split('\n').filter(Boolean));
      done();
    },
  });
  const logged = await startNode({ env: own.nodeEnv, logger: createLogger({ level: 'debug', format: 'json', destination }) });
  return {
    node: logged,
    lines,
    async stop() {
      await logged.stop();
      await own.cleanup();
    },
  };
}

describe(`what the log says (${STORE_KIND})`, () => {
  it('a client that goes away mid-body is the client closing the request, not the database being unavailable', async () => {
    const { node: logged, lines, stop } = await loggedNode();
    try {
      const ownKey = logged.createdAdminKey!;
      await new BatonClient({ server: logged.url, key: ownKey }).createAgent({ name: 'gone' });
      const socket = net.connect(Number(new URL(logged.url).port), '127.0.0.1');
      socket.on('error', () => undefined);
      await new Promise<void>((r) => socket.once('connect', () => r()));
      socket.write(
        `POST /v1/agents/gone/executions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ownKey}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"message":"x`,
      );
      await new Promise((r) => setTimeout(r, 200));
      socket.destroy();
      const until = Date.now() + 5_000;
      while (!lines.some((l) => l.includes('client closed the request')) && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
      expect(lines.filter((l) => l.includes('client closed the request'))).toHaveLength(1);
      expect(lines.filter((l) => l.includes('database unavailable'))).toEqual([]);
      expect((await fetch(logged.url + '/healthz')).status).toBe(200);
    } finally {
      await stop();
    }
  });

  it('a database outage is said once per loop per 30 s, without a stack; any other failure every time, whole', async () => {
    const { node: logged, lines, stop } = await loggedNode();
    try {
      const away = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      for (let i = 0; i < 5; i++) logged.engine.events.emit('loop:error', { loop: 'reaper', error: away });
      for (let i = 0; i < 3; i++) logged.engine.events.emit('loop:error', { loop: 'scheduler', error: away });
      logged.engine.events.emit('loop:error', { loop: 'reaper', error: new Error('a bug') });
      const parsed = lines.map((l) => JSON.parse(l));
      const outage = parsed.filter((l) => /the database is unavailable/.test(l.msg));
      expect(outage.map((l) => [l.loop, l.level, l.code])).toEqual([
        ['reaper', 40, 'ECONNREFUSED'],
        ['scheduler', 40, 'ECONNREFUSED'],
      ]);
      expect(outage.every((l) => l.err === undefined)).toBe(true);
      const bug = parsed.filter((l) => l.msg === 'reaper failed; retrying on the next interval');
      expect(bug).toHaveLength(1);
      expect(bug[0].err.stack).toContain('a bug');
    } finally {
      await stop();
    }
  });
});
