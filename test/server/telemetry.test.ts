/**
 * OpenTelemetry (src/telemetry/tracing.ts), against a real OTLP/HTTP receiver in this file: a
 * node:http server that accepts POST /v1/traces and decodes the JSON the official exporter
 * sends. No mock exporter: what is asserted is what went over the wire.
 *
 * Off (no OTLP endpoint): nothing is sent and no OpenTelemetry module is loaded, yet tasks still
 * carry their traceparent. On: one trace per execution (execution → submitted, admitted,
 * completed) whose ids the worker, `baton worker`'s command (TRACEPARENT) and a push endpoint
 * (the traceparent header) all share; a retry links to the run it retries; HTTP requests and
 * background passes have spans when they fail, or always with BATON_TRACE_PASSES=all.
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BatonClient } from '../../src/client.ts';
import { executionTrace } from '../../src/domain/trace.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { commandRunner } from '../../src/worker/command.ts';
import { createWorker, outcome, type Task } from '../../src/worker/sdk.ts';
import { startTestNode, until } from '../helpers/delivery.ts';
import { describeMultiProcess, openTestStore, type TestStore } from '../helpers/store.ts';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes?: Array<{ key: string; value: Record<string, unknown> }>;
  links?: Array<{ traceId: string; spanId: string }>;
  status?: { code?: number };
}
interface Received {
  service: string | undefined;
  span: OtlpSpan;
}

/** OTLP/JSON ids are hex; accept base64 too (the protobuf-JSON mapping) so the decoding is not the point. */
const hex = (id: string | undefined) => (!id ? '' : /^[0-9a-f]+$/.test(id) ? id : Buffer.from(id, 'base64').toString('hex'));
const attr = (s: OtlpSpan, key: string) => {
  const v = s.attributes?.find((a) => a.key === key)?.value;
  return v && (v.stringValue ?? v.intValue ?? v.boolValue);
};

/** The OTLP/HTTP receiver: every span of every request, decoded. */
async function otlpReceiver(): Promise<{ url: string; spans: Received[]; requests: number; close(): Promise<void> }> {
  const state = { spans: [] as Received[], requests: 0 };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      state.requests++;
      if (req.method !== 'POST' || req.url !== '/v1/traces' || !String(req.headers['content-type']).includes('json')) {
        res.writeHead(415).end();
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        resourceSpans: Array<{
          resource?: { attributes?: OtlpSpan['attributes'] };
          scopeSpans: Array<{ spans: OtlpSpan[] }>;
        }>;
      };
      for (const rs of body.resourceSpans) {
        const service = rs.resource?.attributes?.find((a) => a.key === 'service.name')?.value.stringValue as string | undefined;
        for (const ss of rs.scopeSpans)
          for (const span of ss.spans)
            state.spans.push({
              service,
              span: {
                ...span,
                traceId: hex(span.traceId),
                spanId: hex(span.spanId),
                parentSpanId: hex(span.parentSpanId),
                links: span.links?.map((l) => ({ traceId: hex(l.traceId), spanId: hex(l.spanId) })),
              },
            });
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    get spans() {
      return state.spans;
    },
    get requests() {
      return state.requests;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** A push endpoint that answers every task with success and records its headers. */
async function pushEndpoint(): Promise<{ url: string; seen: IncomingHttpHeaders[]; close(): Promise<void> }> {
  const seen: IncomingHttpHeaders[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      seen.push(req.headers);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ status: 'succeeded', result: 'pushed' }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/task`,
    seen,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/**
 * Whether the OpenTelemetry SDK or exporter has been loaded into this process (they are CommonJS:
 * require's cache has them). Not @opentelemetry/api: prom-client loads that one itself.
 */
const SDK_PACKAGES = ['sdk-trace-node', 'sdk-trace-base', 'exporter-trace-otlp-http', 'resources'];
const otelLoaded = () =>
  Object.keys(createRequire(import.meta.url).cache).some((f) => SDK_PACKAGES.some((p) => f.includes(`/node_modules/@opentelemetry/${p}/`)));

const OTEL_VARS = [
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
  'OTEL_SERVICE_NAME',
  'OTEL_SDK_DISABLED',
  'BATON_TRACE_PASSES',
];
const savedEnv = Object.fromEntries(OTEL_VARS.map((k) => [k, process.env[k]]));
let receiver: Awaited<ReturnType<typeof otlpReceiver>>;

beforeAll(async () => {
  for (const k of OTEL_VARS) delete process.env[k];
  receiver = await otlpReceiver();
});
afterAll(async () => {
  for (const [k, v] of Object.entries(savedEnv))
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  await receiver?.close();
});

/** Run one task of a new pull agent through an in-process SDK worker whose handler runs a command. */
async function runThroughWorker(api: BatonClient, node: BatonNode, key: string, agent: string) {
  await api.createAgent({ name: agent });
  const seen: Task[] = [];
  const runner = commandRunner({ command: 'sh', args: ['-c', 'printf "%s" "$TRACEPARENT"'], orphanWatch: false });
  const worker = createWorker({
    server: node.url,
    key,
    agent,
    claimWaitSeconds: 1,
    handler: (task) => {
      seen.push(task);
      return runner.handler(task);
    },
  });
  await worker.start();
  try {
    const { execution_id } = await api.submit(agent, { message: 'trace me' });
    const done = await api.waitFor(execution_id, { timeoutMs: 20_000, intervalMs: 50 });
    return { id: execution_id, done, task: seen.find((t) => t.executionId === execution_id)! };
  } finally {
    await worker.stop();
  }
}

describe('execution trace ids', () => {
  it('are the first 16 and next 8 bytes of SHA-256("baton-trace:" + id), computed alike in every process', () => {
    // Other processes (older versions in a rolling deployment, a worker) must derive the same ids.
    for (const id of ['exe_0123456789abcdefghij', 'x', '']) {
      const hex = createHash('sha256').update(`baton-trace:${id}`).digest('hex');
      const traceId = hex.slice(0, 32);
      const spanId = hex.slice(32, 48);
      expect(executionTrace(id)).toEqual({ traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` });
    }
  });
});

describe('tracing off (no OTLP endpoint)', () => {
  let ts: TestStore;
  let node: BatonNode;
  let api: BatonClient;
  let key: string;
  beforeAll(async () => {
    ts = await openTestStore();
    ({ node, api, key } = await startTestNode(ts, { dispatcher: false }));
  });
  afterAll(async () => {
    await node?.stop();
    await ts?.cleanup();
  });

  it('sends nothing and loads no OpenTelemetry SDK; tasks still carry their traceparent', async () => {
    const { id, done, task } = await runThroughWorker(api, node, key, 'quiet');
    expect(done.status).toBe('succeeded');
    const expected = executionTrace(id).traceparent;
    expect(expected).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(task.traceparent).toBe(expected);
    expect(done.result).toBe(expected); // TRACEPARENT in the command's environment
    expect((await api.getExecution(id)).traceparent).toBe(expected);
    await node.flushTraces();
    await new Promise((r) => setTimeout(r, 300)); // passes ran meanwhile (reaper every 200 ms)
    expect(receiver.requests).toBe(0);
    expect(otelLoaded()).toBe(false);
  });
});

describe('tracing on (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)', () => {
  let ts: TestStore;
  let node: BatonNode;
  let api: BatonClient;
  let key: string;
  let push: Awaited<ReturnType<typeof pushEndpoint>>;
  beforeAll(async () => {
    process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = `${receiver.url}/v1/traces`;
    process.env.OTEL_SERVICE_NAME = 'baton-under-test';
    ts = await openTestStore();
    push = await pushEndpoint();
    ({ node, api, key } = await startTestNode(ts));
  });
  afterAll(async () => {
    await node?.stop();
    await push?.close();
    await ts?.cleanup();
  });

  /** Flush until `want` holds over what arrived (terminal spans are written after a read of the finished row). */
  const received = <T>(what: string, want: (spans: OtlpSpan[]) => T | undefined | false) =>
    until(what, async () => {
      await node.flushTraces();
      return want(receiver.spans.map((r) => r.span));
    });

  it('one trace per execution: execution → submitted, admitted, completed; the worker and its command join it', async () => {
    const { id, done, task } = await runThroughWorker(api, node, key, 'traced');
    expect(done.status).toBe('succeeded');
    const { traceId, spanId, traceparent } = executionTrace(id);
    expect(task.traceparent).toBe(traceparent);
    expect(done.result).toBe(traceparent);

    const spans = await received('the execution trace', (all) => {
      const mine = all.filter((s) => s.traceId === traceId);
      return ['execution', 'submitted', 'admitted', 'completed'].every((n) => mine.some((s) => s.name === n)) && mine;
    });
    expect(spans.map((s) => s.name).sort()).toEqual(['admitted', 'completed', 'execution', 'submitted']);
    const root = spans.find((s) => s.name === 'execution')!;
    expect(root.spanId).toBe(spanId); // the span the worker's traceparent names as its parent
    expect(root.parentSpanId).toBe('');
    for (const s of spans.filter((x) => x !== root)) {
      expect(s.parentSpanId, s.name).toBe(spanId);
      expect(attr(s, 'baton.execution.id'), s.name).toBe(id);
    }
    expect(attr(root, 'baton.status')).toBe('succeeded');
    expect(attr(root, 'baton.agent')).toBe('traced');
    // Times come from the row: the root covers creation to completion, the others sit inside it.
    const t = (s: OtlpSpan, k: 'startTimeUnixNano' | 'endTimeUnixNano') => BigInt(s[k]);
    expect(t(root, 'startTimeUnixNano')).toBe(BigInt(Date.parse(done.created_at)) * 1_000_000n);
    expect(t(root, 'endTimeUnixNano')).toBe(BigInt(Date.parse(done.completed_at!)) * 1_000_000n);
    for (const s of spans) expect(t(s, 'endTimeUnixNano') >= t(s, 'startTimeUnixNano'), s.name).toBe(true);
    expect(receiver.spans.find((r) => r.span === root)?.service).toBe('baton-under-test');
  });

  it('HTTP requests have spans', async () => {
    const http = await received('a claim request span', (all) =>
      all.find((s) => s.kind === 2 && attr(s, 'http.route') === '/v1/agents/:agent/claim'),
    );
    expect(http.name).toBe('POST /v1/agents/:agent/claim');
    expect(attr(http, 'http.request.method')).toBe('POST');
    expect(attr(http, 'http.response.status_code')).toBeDefined();
  });

  it('an idle server exports no background pass spans by default (BATON_TRACE_PASSES=errors)', async () => {
    // The reaper runs every 200 ms here: a second idle is several passes, none of them a span.
    const before = receiver.spans.length;
    await new Promise((r) => setTimeout(r, 1_000));
    await node.flushTraces();
    const idle = receiver.spans.slice(before).map((r) => r.span.name);
    expect(idle.filter((n) => n.startsWith('pass '))).toEqual([]);
    expect(receiver.spans.filter((r) => r.span.name.startsWith('pass '))).toEqual([]);
  });

  it('an incoming traceparent makes the request span its child', async () => {
    const parent = executionTrace('caller-side');
    const res = await fetch(`${node.url}/v1/agents`, { headers: { authorization: `Bearer ${key}`, traceparent: parent.traceparent } });
    expect(res.status).toBe(200);
    const span = await received('the GET /v1/agents span', (all) => all.find((s) => s.traceId === parent.traceId));
    expect(span.name).toBe('GET /v1/agents');
    expect(span.parentSpanId).toBe(parent.spanId);
  });

  it('a push delivery carries the execution trace as its traceparent header', async () => {
    await api.createAgent({ name: 'pushed', delivery: 'push', push_url: push.url });
    const { execution_id } = await api.submit('pushed', { message: 'over http' });
    const done = await api.waitFor(execution_id, { timeoutMs: 20_000, intervalMs: 50 });
    expect(done.status).toBe('succeeded');
    const headers = push.seen.find((h) => h['x-baton-execution-id'] === execution_id)!;
    expect(headers.traceparent).toBe(executionTrace(execution_id).traceparent);
    await received('the pushed execution trace', (all) =>
      all.find((s) => s.name === 'execution' && s.traceId === executionTrace(execution_id).traceId),
    );
  });

  it('a retry is its own trace, linked to the run it retries', async () => {
    await api.createAgent({ name: 'flaky' });
    let calls = 0;
    const worker = createWorker({
      server: node.url,
      key,
      agent: 'flaky',
      claimWaitSeconds: 1,
      handler: () => (++calls === 1 ? outcome({ status: 'failed', error: { code: 'boom', message: 'first try fails' } }) : 'second try'),
    });
    await worker.start();
    try {
      const first = await api.submit('flaky', { message: 'try twice', retry: { max_attempts: 2, base_seconds: 0, jitter: 0 } });
      const retryId = await until('the retry', async () => {
        const d = await api.getExecution(first.execution_id);
        return d.retry_chain.length === 2 && d.retry_chain[1];
      });
      expect((await api.waitFor(retryId, { timeoutMs: 20_000, intervalMs: 50 })).status).toBe('succeeded');
      const original = executionTrace(first.execution_id);
      const retry = executionTrace(retryId);
      expect(retry.traceId).not.toBe(original.traceId);
      const [failedRoot, retryRoot] = await received('both execution spans', (all) => {
        const a = all.find((s) => s.name === 'execution' && s.traceId === original.traceId);
        const b = all.find((s) => s.name === 'execution' && s.traceId === retry.traceId);
        return a && b && [a, b];
      });
      expect(failedRoot.status?.code).toBe(2); // ERROR
      expect(attr(failedRoot, 'baton.error.code')).toBe('boom');
      expect(retryRoot.links).toEqual([{ traceId: original.traceId, spanId: original.spanId }]);
    } finally {
      await worker.stop();
    }
  });

  describeMultiProcess('two processes on one database', () => {
    let other: BatonNode;
    afterAll(async () => other?.stop());

    it('each span is written once: the spans of a change come from the process that made it', async () => {
      ({ node: other } = await startTestNode(ts, { dispatcher: false }));
      await api.createAgent({ name: 'elsewhere' });
      // Submitted through this node, admitted and completed through the other one.
      const worker = createWorker({ server: other.url, key, agent: 'elsewhere', claimWaitSeconds: 1, handler: () => 'done' });
      await worker.start();
      try {
        const { execution_id } = await api.submit('elsewhere', { message: 'cross' });
        expect((await api.waitFor(execution_id, { timeoutMs: 20_000, intervalMs: 50 })).status).toBe('succeeded');
        const { traceId } = executionTrace(execution_id);
        await received('the cross-process trace', (all) => all.some((s) => s.traceId === traceId && s.name === 'execution'));
        await other.flushTraces();
        await node.flushTraces();
        const names = receiver.spans.filter((r) => r.span.traceId === traceId).map((r) => r.span.name);
        expect(names.sort()).toEqual(['admitted', 'completed', 'execution', 'submitted']);
      } finally {
        await worker.stop();
      }
    });
  });

  it('the OpenTelemetry SDK was loaded for this (the off check above can tell)', () => {
    expect(otelLoaded()).toBe(true);
  });
});

describe('tracing on with BATON_TRACE_PASSES=all', () => {
  let ts: TestStore;
  let node: BatonNode;
  beforeAll(async () => {
    process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = `${receiver.url}/v1/traces`;
    process.env.BATON_TRACE_PASSES = 'all';
    ts = await openTestStore();
    ({ node } = await startTestNode(ts, { dispatcher: false }));
  });
  afterAll(async () => {
    delete process.env.BATON_TRACE_PASSES;
    await node?.stop();
    await ts?.cleanup();
  });

  it('every background pass is a span, a root of its own', async () => {
    const pass = await until('a reaper pass span', async () => {
      await node.flushTraces();
      return receiver.spans.map((r) => r.span).find((s) => s.name === 'pass reaper');
    });
    expect(attr(pass, 'baton.loop')).toBe('reaper');
    expect(pass.parentSpanId).toBe('');
  });
});
