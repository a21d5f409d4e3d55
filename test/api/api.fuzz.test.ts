/**
 * Malformed requests at every route. Whatever arrives: never a 5xx, every refusal is a JSON
 * `{error, message}` in our vocabulary, and a refused request writes no row anywhere.
 */
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import { sql, type RawBuilder } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../../src/api/server.ts';
import { KeyStore } from '../../src/auth/keys.ts';
import { Engine } from '../../src/engine/engine.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
let app: FastifyInstance;
let admin: string;
let agentKey: string;
/** The fixture: one agent with a queued and a running execution (whose lease token we hold). */
const AGENT = 'fuzz-a';
let queuedId: string;
let runningId: string;
let leaseToken: string;
/** A running execution of its own for the mutation property (the chaos may finish the first). */
const held = { id: '', token: '' };

/** Row counts of every table in the store, in one statement (tables are found, not listed). */
let countRows: RawBuilder<Record<string, unknown>>;
async function rowCounts(): Promise<Record<string, number>> {
  const { rows } = await countRows.execute(ts.store.db);
  return Object.fromEntries(Object.entries(rows[0]!).map(([t, n]) => [t, Number(n)]));
}

/** What /openapi.json documents: `METHOD /path/{param}`, whether the route streams or long-polls, and the statuses it declares. */
let documented: Array<{ method: Req['method']; template: string; longLived: boolean; statuses: Set<number> }> = [];

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'fuzz' });
  const keys = new KeyStore(ts.store);
  app = await buildServer({ engine, keys, logger: false });
  admin = (await keys.create({ name: 'admin', scope: 'admin' }, 'test')).key;
  await engine.agents.create({ name: AGENT, max_parallel: 10_000, max_backlog: 1_000_000 }, 'test');
  agentKey = (await keys.create({ name: 'worker', scope: 'agent', agent: AGENT }, 'test')).key;
  runningId = (await engine.submit(AGENT, { message: 'running' }, 'test')).id;
  const [claimed] = await engine.claim(AGENT, { owner: 'fixture' });
  leaseToken = claimed!.lease_token!;
  queuedId = (await engine.submit(AGENT, { message: 'queued' }, 'test')).id;

  const tables = (await ts.store.db.introspection.getTables())
    .filter((t) => !t.isView && t.name !== 'baton_migrations' && (STORE_KIND === 'sqlite' || t.schema === ts.location.schema))
    .map((t) => t.name);
  expect(tables).toEqual(expect.arrayContaining(['agents', 'executions', 'execution_events', 'api_keys', 'audit_log']));
  countRows = sql.raw(`SELECT ${tables.map((t) => `(SELECT count(*) FROM "${t}") AS "${t}"`).join(', ')}`);

  const spec = JSON.parse((await app.inject({ method: 'GET', url: '/openapi.json' })).body);
  documented = Object.entries(
    spec.paths as Record<string, Record<string, { summary?: string; responses?: Record<string, unknown> }>>,
  ).flatMap(([template, ops]) =>
    Object.entries(ops).map(([method, op]) => ({
      method: method.toUpperCase() as Req['method'],
      template,
      longLived: /long-poll|server-sent|sse|stream/i.test(op.summary ?? ''),
      statuses: new Set(
        Object.keys(op.responses ?? {})
          .filter((k) => /^\d{3}$/.test(k))
          .map(Number),
      ),
    })),
  );
});
afterAll(async () => {
  await app?.close();
  engine?.close();
  await ts?.cleanup();
});

// ── what one request looks like ─────────────────────────────────────────────

interface Req {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE' | 'PUT';
  url: string;
  headers: Record<string, string>;
  payload?: string;
  /** The route may hold an accepted request open (long-poll claim, event streams). */
  longLived?: boolean;
  /** `METHOD /documented/{template}`, when the request aims at a documented route. */
  template?: string;
}

interface Answer {
  status: number;
  contentType: string;
  body: any;
}

/**
 * Send one request. A long-poll claim or a stream that was accepted would stay open: give up on
 * it after a moment (the server sees the client go away and stops); it was not refused. Any
 * other route that does not answer within 10 s fails the run.
 */
async function send(req: Req): Promise<Answer | 'accepted_long_poll'> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), req.longLived ? 300 : 10_000);
  try {
    const res = await app.inject({ method: req.method, url: req.url, headers: req.headers, payload: req.payload, signal: abort.signal });
    const contentType = String(res.headers['content-type'] ?? '');
    // The web UI answers HTML; everything else is JSON.
    const body = res.body && contentType.startsWith('application/json') ? JSON.parse(res.body) : res.body || null;
    return { status: res.statusCode, contentType, body };
  } catch (err) {
    if (abort.signal.aborted && req.longLived) return 'accepted_long_poll';
    if (abort.signal.aborted) throw new Error(`no answer within 10 s: ${req.method} ${req.url}`);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** The invariants every answer keeps, and the no-write rule for refusals. */
async function check(req: Req, expected?: (a: Answer) => void): Promise<Answer | 'accepted_long_poll'> {
  const before = await rowCounts();
  const a = await send(req);
  if (a === 'accepted_long_poll') return a;
  const what = `${req.method} ${req.url} ${JSON.stringify(req.headers)} ${req.payload?.slice(0, 300)} → ${a.status} ${JSON.stringify(a.body)?.slice(0, 300)}`;
  expect(a.status, what).toBeLessThan(500);
  // The contract says what the server does: every answer is a status the route declares.
  const route = documented.find((d) => `${d.method} ${d.template}` === req.template);
  if (route && !(a.status < 300 && route.statuses.has(a.status === 204 ? 204 : a.status))) {
    if (a.status >= 300 || route.statuses.size > 0)
      expect([...route.statuses], `${req.template} answered ${a.status}, which /openapi.json does not declare: ${what}`).toContain(
        a.status,
      );
  }
  if (a.status >= 400) {
    expect(a.contentType, what).toMatch(/^application\/json/);
    expect(typeof a.body?.error, what).toBe('string');
    expect(a.body.error, what).toMatch(/^[a-z_]+$/);
    expect(typeof a.body.message, what).toBe('string');
    expect(a.body.message.length, what).toBeGreaterThan(0);
    expect(JSON.stringify(a.body), what).not.toMatch(/at .*\.(ts|js):\d+/); // no stack trace
    // A backlog refusal is audited on purpose (one audit_log row); any other refusal writes nothing.
    const audited = a.status === 429 && a.body.error === 'backlog_full' ? 1 : 0;
    const after = await rowCounts();
    const written = Object.fromEntries(
      Object.keys(after)
        .filter((t) => after[t] !== before[t])
        .map((t) => [t, after[t]! - before[t]!]),
    );
    expect(written, `a refusal wrote rows: ${what}`).toEqual(audited ? { audit_log: 1 } : {});
  }
  expected?.(a);
  return a;
}

// ── arbitraries ─────────────────────────────────────────────────────────────

const FIELDS = [
  'name',
  'description',
  'max_parallel',
  'max_backlog',
  'timeout_seconds',
  'lease_ttl_seconds',
  'max_redeliveries',
  'delivery',
  'push_url',
  'message',
  'payload',
  'priority',
  'run_after',
  'delay_seconds',
  'worker_id',
  'wait_seconds',
  'max',
  'lease_token',
  'status',
  'result',
  'error',
  'usage',
  'scope',
  'agent',
  'code',
];

const nasty = fc.constantFrom(
  1e308,
  -1e308,
  2 ** 53 + 1,
  -(2 ** 53),
  2 ** 31,
  -1,
  0,
  0.5,
  -0.0001,
  1e-300,
  99999999999,
  '',
  ' ',
  'a\u0000b',
  '\u0000',
  '💥',
  'x'.repeat(5000),
  '<script>',
  "'; DROP TABLE agents; --",
  '1',
  'true',
  'null',
  '2026-01-01T00:00:00Z',
  '9999-12-31T23:59:59Z',
  'LEASE',
  'bt_0000000000000000_' + 'a'.repeat(43),
  'succeeded',
  'admin',
  'agent',
  'pull',
  true,
  false,
  null,
  [],
  {},
  [null],
  { nested: { deep: [1, { x: null }] } },
);
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  { arbitrary: nasty, weight: 4 },
  { arbitrary: fc.jsonValue({ maxDepth: 2 }), weight: 2 },
  { arbitrary: fc.string({ unit: 'binary', maxLength: 40 }), weight: 2 },
  { arbitrary: fc.double(), weight: 1 },
  { arbitrary: fc.integer(), weight: 1 },
);
const fieldName = fc.oneof({ arbitrary: fc.constantFrom(...FIELDS), weight: 5 }, { arbitrary: fc.string({ maxLength: 12 }), weight: 1 });
const objectBody = fc.dictionary(fieldName, anyValue, { maxKeys: 5 });

const RAW_BODIES = [
  '{',
  '}',
  '[',
  '{"name":',
  '{"name": "a",}',
  "{'name': 'a'}",
  'nul',
  'undefined',
  'NaN',
  '1e999',
  '-',
  '""',
  '"\\ud800"',
  '{"__proto__": {"admin": true}}',
  '{"constructor": {"prototype": {"x": 1}}}',
  '{"message": "m", "message": 5}',
  '\u0000',
  '\uFEFF{}',
  '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]',
  'name=a&scope=admin',
  // Nesting deep enough to overflow a recursive walk (JSON.stringify, redaction): refused up front.
  '['.repeat(5000) + ']'.repeat(5000),
  '{"message":"m","payload":' + '{"a":'.repeat(4000) + '1' + '}'.repeat(4000) + '}',
  '{"lease_token":"LEASE","status":"succeeded","result":' + '['.repeat(5000) + ']'.repeat(5000) + '}',
];
const CONTENT_TYPES = [
  'application/json',
  'application/json; charset=utf-8',
  'APPLICATION/JSON',
  'text/plain',
  'application/x-www-form-urlencoded',
  'application/octet-stream',
  'multipart/form-data; boundary=x',
  'application/vnd.api+json',
  'application/json; charset=latin1',
  'garbage',
];

type Body = { payload?: string; contentType?: string };
const body: fc.Arbitrary<Body> = fc.oneof(
  { arbitrary: fc.constant({}), weight: 1 },
  { arbitrary: objectBody.map((o) => ({ payload: JSON.stringify(o), contentType: 'application/json' })), weight: 5 },
  {
    arbitrary: fc.jsonValue({ maxDepth: 2 }).map((v) => ({ payload: JSON.stringify(v) ?? 'null', contentType: 'application/json' })),
    weight: 2,
  },
  {
    arbitrary: fc.record({
      payload: fc.oneof(
        fc.constantFrom(...RAW_BODIES),
        fc.string({ unit: 'binary', maxLength: 60 }),
        objectBody.map((o) => JSON.stringify(o)),
      ),
      contentType: fc.option(fc.constantFrom(...CONTENT_TYPES), { nil: undefined }),
    }),
    weight: 3,
  },
);

/** Percent-encode what can be; keep a few raw pieces that break the URL on purpose. */
const segment = (valid: string[]) =>
  fc.oneof(
    { arbitrary: fc.constantFrom(...valid), weight: 3 },
    { arbitrary: fc.string({ unit: 'binary', maxLength: 30 }).map(encodeURIComponent), weight: 3 },
    {
      arbitrary: fc.constantFrom(
        '%00',
        '%E0%A4%A',
        '%',
        '%%',
        '..',
        '.',
        '%2F',
        'A',
        'UPPER',
        '-',
        '_',
        'a'.repeat(65),
        'ex_' + 'x'.repeat(70),
        '%20',
        '💥',
        '\u00e9',
      ),
      weight: 2,
    },
  );
const agentParam = segment([AGENT, 'no-such-agent', 'a']);
const idParam = () => segment([queuedId, runningId, 'ex_doesnotexist', 'x']);

const QUERY_KEYS = ['agent', 'status', 'schedule_id', 'since', 'until', 'limit', 'cursor', 'follow', 'after', 'before', 'full', 'state'];
const queryString = fc.oneof(
  { arbitrary: fc.constant(''), weight: 3 },
  {
    arbitrary: fc
      .array(
        fc.tuple(
          fc.oneof(fc.constantFrom(...QUERY_KEYS), fc.string({ maxLength: 8 })),
          fc.oneof(
            fc.constantFrom(
              '',
              'true',
              '1',
              'running',
              'queued,running',
              'queued,,bogus',
              '0',
              '-1',
              '501',
              '1e999',
              '2.5',
              'abc',
              'AGENT',
              AGENT,
              '2026-13-45T99:99:99Z',
              'MTox',
              '%%%',
              Buffer.from('99999999999999999999:ex_a').toString('base64url'),
            ),
            // Numbers past every column type (int4, int8, a double's integers).
            fc.constantFrom(
              '2147483647',
              '2147483648',
              '-2147483649',
              '9223372036854775807',
              '9223372036854775808',
              '1e20',
              '9007199254740993',
              '-9223372036854775809',
            ),
            fc.string({ unit: 'binary', maxLength: 20 }),
          ),
        ),
        { maxLength: 4 },
      )
      .map((pairs) => '?' + pairs.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&')),
    weight: 3,
  },
  {
    arbitrary: fc.constantFrom('?', '?&&&', '?%', '?a[b]=1', '?limit=1&limit=2', '?status[]=running', '?=x', '?cursor', '?agent=%00'),
    weight: 1,
  },
);

const auth = fc.oneof(
  { arbitrary: fc.constant('admin'), weight: 8 },
  { arbitrary: fc.constant('agent'), weight: 2 },
  {
    arbitrary: fc.constantFrom('none', 'Bearer', 'Bearer bt_', 'bearer ADMIN', 'Basic YTpi', 'Bearer ADMIN_TAIL', 'Bearer \u00e9'),
    weight: 1,
  },
);
function authHeader(kind: string): Record<string, string> {
  if (kind === 'none') return {};
  if (kind === 'admin') return { authorization: `Bearer ${admin}` };
  if (kind === 'agent') return { authorization: `Bearer ${agentKey}` };
  if (kind === 'bearer ADMIN') return { authorization: `bearer ${admin}` };
  if (kind === 'Bearer ADMIN_TAIL') return { authorization: `Bearer ${admin}x` };
  return { authorization: kind };
}

/**
 * A path parameter. The fixture's agent and executions appear by name, so requests reach past
 * the existence checks; any other id is never a real one (deleting or revoking the fixture's
 * agent or keys would only narrow the rest of the run).
 */
function param(name: string, method: Req['method'], template: string): fc.Arbitrary<string> {
  if (name === 'agent') return method === 'DELETE' ? agentParam.filter((a) => a !== AGENT) : agentParam;
  if (name === 'id' && template.startsWith('/v1/executions/')) return idParam();
  return segment(['0123456789abcdef', 'no-such-thing', 'x']);
}

/** Every documented route, with its path filled in; plus a few paths outside the API. */
interface Route {
  method: Req['method'];
  template: string;
  longLived: boolean;
  path: fc.Arbitrary<string>;
}
function routes(): Route[] {
  const out: Route[] = documented.map(({ method, template, longLived }) => {
    const parts = template.split(/(\{[^}]+\})/).filter(Boolean);
    const arbs = parts.map((p) => (p.startsWith('{') ? param(p.slice(1, -1), method, template) : fc.constant(p)));
    return { method, template, longLived, path: fc.tuple(...arbs).map((xs) => xs.join('')) };
  });
  out.push({
    method: 'GET',
    template: '(outside the API)',
    longLived: false,
    path: fc.constantFrom('/healthz', '/readyz', '/openapi.json', '/', '/v1', '/v1/', '/nope'),
  });
  return out;
}

/** Requests over every route, or over the routes of one template (`only`, e.g. "GET /v1/executions/{id}/logs"). */
const request = (only?: string): fc.Arbitrary<Req & { template: string }> =>
  fc
    .record({
      // An accepted stream costs a wait before the client gives up on it: fewer of those.
      route: fc.oneof(
        ...routes()
          .filter((r) => only === undefined || `${r.method} ${r.template}` === only)
          .map((r) => ({
            arbitrary: r.path.map((path) => ({ ...r, path })),
            weight: r.longLived && !r.template.endsWith('/claim') ? 1 : 4,
          })),
      ),
      wrongMethod: fc.oneof(
        { arbitrary: fc.constant(undefined), weight: 7 },
        { arbitrary: fc.constantFrom<Req['method']>('GET', 'POST', 'PATCH', 'DELETE', 'PUT'), weight: 1 },
      ),
      query: queryString,
      body,
      auth,
    })
    .map(({ route, wrongMethod, query, body: b, auth: who }) => {
      const headers = authHeader(who);
      if (b.contentType) headers['content-type'] = b.contentType;
      // The real lease token, sometimes, so lease calls reach past the token check.
      const payload = b.payload?.replace('"LEASE"', JSON.stringify(leaseToken));
      let method = wrongMethod ?? route.method;
      if (method === 'DELETE' && route.path === `/v1/agents/${AGENT}`) method = 'PUT'; // keep the fixture
      return { method, url: route.path + query, headers, payload, longLived: route.longLived, template: `${method} ${route.template}` };
    });

// ── body mutations: start valid, break exactly one thing ───────────────────

type Spec =
  | { kind: 'int' | 'number'; min: number; max: number }
  | { kind: 'string'; min: number; max: number; nullable?: boolean; nul?: 'allowed' }
  | { kind: 'lines' }
  | { kind: 'enum'; values: string[] }
  | { kind: 'datetime' }
  | { kind: 'url' };

interface BodyRoute {
  method: Req['method'];
  template: string;
  path: () => string;
  valid: () => Record<string, unknown>;
  required: string[];
  fields: Record<string, Spec>;
}

const agentFields: Record<string, Spec> = {
  description: { kind: 'string', min: 0, max: 1000, nullable: true },
  max_parallel: { kind: 'int', min: 0, max: 10_000 },
  max_backlog: { kind: 'int', min: 0, max: 1_000_000 },
  timeout_seconds: { kind: 'int', min: 1, max: 7 * 86_400 },
  lease_ttl_seconds: { kind: 'int', min: 1, max: 3600 },
  max_redeliveries: { kind: 'int', min: 0, max: 100 },
  delivery: { kind: 'enum', values: ['pull', 'push'] },
  push_url: { kind: 'url' },
};
const validAgentSettings = {
  description: 'd',
  max_parallel: 2,
  max_backlog: 10,
  timeout_seconds: 60,
  lease_ttl_seconds: 30,
  max_redeliveries: 1,
  delivery: 'pull',
  push_url: 'https://example.com/hook',
};
let fresh = 0;
const ALL_BODY_ROUTES: BodyRoute[] = [
  {
    method: 'POST',
    template: '/v1/agents',
    path: () => '/v1/agents',
    valid: () => ({ name: `fz-new-${++fresh}`, ...validAgentSettings }),
    required: ['name'],
    fields: { name: { kind: 'string', min: 1, max: 63 }, ...agentFields },
  },
  {
    method: 'PATCH',
    template: '/v1/agents/{agent}',
    path: () => `/v1/agents/${AGENT}`,
    valid: () => ({ ...validAgentSettings }),
    required: [],
    fields: agentFields,
  },
  {
    method: 'POST',
    template: '/v1/agents/{agent}/executions',
    path: () => `/v1/agents/${AGENT}/executions`,
    valid: () => ({ message: 'm', payload: { a: 1 }, priority: 0, delay_seconds: 60 }),
    required: ['message'],
    fields: {
      message: { kind: 'string', min: 1, max: 100_000 },
      priority: { kind: 'int', min: -1000, max: 1000 },
      delay_seconds: { kind: 'number', min: 0, max: 365 * 86_400 },
      run_after: { kind: 'datetime' },
    },
  },
  {
    method: 'POST',
    template: '/v1/agents/{agent}/claim',
    path: () => `/v1/agents/${AGENT}/claim`,
    valid: () => ({ worker_id: 'w', wait_seconds: 0, max: 1 }),
    required: [],
    fields: {
      worker_id: { kind: 'string', min: 1, max: 200 },
      wait_seconds: { kind: 'number', min: 0, max: 60 },
      max: { kind: 'int', min: 1, max: 100 },
    },
  },
  {
    method: 'POST',
    template: '/v1/executions/{id}/heartbeat',
    path: () => `/v1/executions/${held.id}/heartbeat`,
    valid: () => ({ lease_token: held.token }),
    required: ['lease_token'],
    fields: { lease_token: { kind: 'string', min: 1, max: 200 } },
  },
  {
    method: 'POST',
    template: '/v1/executions/{id}/release',
    path: () => `/v1/executions/${held.id}/release`,
    valid: () => ({ lease_token: held.token }),
    required: ['lease_token'],
    fields: { lease_token: { kind: 'string', min: 1, max: 200 } },
  },
  {
    method: 'POST',
    template: '/v1/executions/{id}/complete',
    path: () => `/v1/executions/${held.id}/complete`,
    valid: () => ({ lease_token: held.token, status: 'succeeded', result: { ok: true }, usage: { input_tokens: 1 } }),
    required: ['lease_token', 'status'],
    fields: { lease_token: { kind: 'string', min: 1, max: 200 }, status: { kind: 'enum', values: ['succeeded', 'failed', 'cancelled'] } },
  },
  {
    method: 'POST',
    template: '/v1/executions/{id}/logs',
    path: () => `/v1/executions/${held.id}/logs`,
    valid: () => ({ lease_token: held.token, lines: [{ stream: 'stderr', line: 'l' }] }),
    required: ['lease_token', 'lines'],
    // This token is only compared, never stored, so a NUL in it is a lease_lost, not a 400.
    fields: { lease_token: { kind: 'string', min: 1, max: 200, nul: 'allowed' }, lines: { kind: 'lines' } },
  },
  {
    method: 'POST',
    template: '/v1/keys',
    path: () => '/v1/keys',
    valid: () => ({ name: 'k', scope: 'agent', agent: AGENT }),
    required: ['name', 'scope'],
    fields: {
      name: { kind: 'string', min: 1, max: 200 },
      scope: { kind: 'enum', values: ['admin', 'agent'] },
      agent: { kind: 'string', min: 1, max: 63 },
    },
  },
];

/** A value `spec` must refuse. */
function badValue(spec: Spec): fc.Arbitrary<unknown> {
  const wrongType = fc.constantFrom<unknown>(true, [], {}, [1], { a: 1 });
  switch (spec.kind) {
    case 'int':
      return fc.oneof(
        wrongType,
        fc.constantFrom(null, String(spec.min), spec.min - 1, spec.max + 1, spec.min + 0.5, 1e308, -1e308, 'NaN'),
        fc.integer({ min: spec.max + 1, max: Number.MAX_SAFE_INTEGER }),
        fc.double({ min: spec.min + 0.001, max: spec.min + 0.999, noNaN: true }),
      );
    case 'number':
      return fc.oneof(
        wrongType,
        fc.constantFrom(null, String(spec.max), spec.min - 0.001, spec.max + 1, 1e308, -1e308),
        fc.double({ max: spec.min - 1e-9, noNaN: true, noDefaultInfinity: true }),
      );
    case 'string':
      return fc.oneof(
        wrongType,
        fc.constantFrom<unknown>(
          ...(spec.nullable ? [] : [null]),
          ...(spec.nul === 'allowed' ? [] : ['a\u0000b']),
          0,
          -1,
          1e308,
          'x'.repeat(spec.max + 1),
        ),
        ...(spec.min > 0 ? [fc.constant('')] : []),
      );
    case 'enum':
      return fc.oneof(
        wrongType,
        fc.constantFrom<unknown>(null, 0, '', 'SUCCEEDED', 'done'),
        fc.string({ maxLength: 10 }).filter((s) => !spec.values.includes(s)),
      );
    case 'datetime':
      return fc.oneof(wrongType, fc.constantFrom<unknown>('yesterday', '2026-13-01T00:00:00Z', 0));
    case 'url':
      return fc.oneof(wrongType, fc.constantFrom<unknown>('not a url', '', 0, 'http://a/\u0000'));
    case 'lines':
      return fc.constantFrom<unknown>(
        true,
        {},
        'line',
        0,
        null,
        [1],
        ['line'],
        [{}],
        [{ line: 1 }],
        [{ line: 'l', stream: 'system' }],
        [{ line: 'l', extra: 1 }],
        Array.from({ length: 1001 }, () => ({ line: 'l' })),
      );
  }
}

/** The body routes this server has (a route still being built may not be there yet). */
const bodyRoutes = () => ALL_BODY_ROUTES.filter((r) => documented.some((d) => d.method === r.method && d.template === r.template));

type Mutation = { route: BodyRoute; body: unknown; field: string | null; unknownKey?: string };
const mutation = (): fc.Arbitrary<Mutation> =>
  fc.constantFrom(...bodyRoutes()).chain((route) => {
    const options: fc.Arbitrary<Mutation>[] = [
      // An unknown key: every body is a strict object.
      fc
        .string({ minLength: 1, maxLength: 12 })
        .filter((k) => !(k in route.valid()) && !(k in route.fields) && k !== '__proto__')
        .map((k) => ({ route, body: { ...route.valid(), [k]: 1 }, field: null, unknownKey: k })),
      // Not an object at all (null is a bare POST for claim, which is valid there).
      fc
        .constantFrom<unknown>([], [route.valid()], 'text', 0, true, ...(route.path().endsWith('/claim') ? [] : [null]))
        .map((b) => ({ route, body: b, field: 'body' })),
    ];
    for (const f of route.required) {
      options.push(
        fc.constant({ route, body: Object.fromEntries(Object.entries(route.valid()).filter(([k]) => k !== f)), field: `body.${f}` }),
      );
    }
    for (const [f, spec] of Object.entries(route.fields)) {
      options.push(badValue(spec).map((v) => ({ route, body: { ...route.valid(), [f]: v }, field: `body.${f}` })));
    }
    return fc.oneof(...options);
  });

// ── the properties ──────────────────────────────────────────────────────────

/** BATON_FUZZ_SCALE=10 for a deeper run by hand; the default keeps each store under ~10 s. */
const SCALE = Number(process.env.BATON_FUZZ_SCALE ?? 1);
const RUNS = { chaos: Math.round(1000 * SCALE), mutations: Math.round(400 * SCALE) };

describe(`API fuzz (${STORE_KIND})`, { timeout: 60_000 * SCALE }, () => {
  it('survives malformed requests at every route: no 5xx, JSON refusals, no writes', async () => {
    let refusedCount = 0;
    const seen = new Map<number, number>();
    const hit = new Set<string>();
    const property = (arb: fc.Arbitrary<Req & { template: string }>) =>
      fc.asyncProperty(arb, async (req) => {
        hit.add(req.template);
        const a = await check(req);
        const status = a === 'accepted_long_poll' ? 0 : a.status;
        seen.set(status, (seen.get(status) ?? 0) + 1);
        if (status >= 400) refusedCount++;
      });
    await fc.assert(property(request()), { numRuns: RUNS.chaos });
    // A route the random draw missed (a long-lived one is drawn about 1 time in 250) is drawn on
    // its own until it is hit (a draw can still swap its method).
    for (const d of documented) {
      const route = `${d.method} ${d.template}`;
      for (let tries = 0; !hit.has(route) && tries < 50; tries++) await fc.assert(property(request(route)), { numRuns: 1 });
    }
    // The run must mostly be refusals of several kinds, not one answer over and over.
    expect(refusedCount).toBeGreaterThan(RUNS.chaos / 2);
    for (const s of [400, 401, 403, 404]) expect(seen.get(s) ?? 0, `answers by status: ${JSON.stringify([...seen])}`).toBeGreaterThan(0);
    // Every documented route was fuzzed.
    expect(documented.length).toBeGreaterThanOrEqual(16);
    expect(documented.map((d) => `${d.method} ${d.template}`).filter((r) => !hit.has(r))).toEqual([]);
  });

  it('refuses every body with exactly one thing wrong: 400 validation_error naming it, nothing written', async () => {
    await engine.agents.create({ name: 'fuzz-held' }, 'test');
    held.id = (await engine.submit('fuzz-held', { message: 'held' }, 'test')).id;
    held.token = (await engine.claim('fuzz-held', { owner: 'fixture' }))[0]!.lease_token!;
    await fc.assert(
      fc.asyncProperty(mutation(), async (m) => {
        await check(
          {
            method: m.route.method,
            url: m.route.path(),
            headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
            payload: JSON.stringify(m.body),
            template: `${m.route.method} ${m.route.template}`,
          },
          (a) => {
            expect({ status: a.status, error: a.body?.error }, JSON.stringify(m.body).slice(0, 200)).toEqual({
              status: 400,
              error: 'validation_error',
            });
            if (m.unknownKey !== undefined) expect(a.body.message).toMatch(/Unrecognized key/);
            else expect(a.body.message).toContain(m.field);
          },
        );
      }),
      { numRuns: RUNS.mutations },
    );
    // The fixture survived: its running execution still holds the lease the mutations tried to use.
    const { execution } = await engine.getExecution(held.id);
    expect(execution.status).toBe('running');
    expect(execution.lease_token).toBe(held.token);
  });

  it('accepts the valid bodies the mutations start from (the mutations test what they claim to)', async () => {
    expect(bodyRoutes().length).toBeGreaterThanOrEqual(8);
    for (const route of bodyRoutes().filter((r) => !/heartbeat|release|complete/.test(r.path()))) {
      const a = await send({
        method: route.method,
        url: route.path(),
        headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
        payload: JSON.stringify(route.valid()),
      });
      expect(a === 'accepted_long_poll' ? 200 : a.status, `${route.method} ${route.path()}`).toBeLessThan(300);
    }
    const hb = await send({
      method: 'POST',
      url: `/v1/executions/${held.id}/heartbeat`,
      headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
      payload: JSON.stringify({ lease_token: held.token }),
    });
    expect(hb).toMatchObject({ status: 200 });
  });
});
