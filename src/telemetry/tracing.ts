/**
 * OpenTelemetry tracing for `baton up` (docs/operations.md, "OpenTelemetry"). src/server/up.ts
 * imports this module only when an OTLP endpoint is configured, so with tracing off no
 * OpenTelemetry code is loaded at all.
 *
 * Everything here is a subscriber: the engine emits its events (src/engine/events.ts) and knows
 * nothing of tracing. What becomes a span:
 * - an execution: one trace per execution, its ids derived from the execution id
 *   (src/domain/trace.ts), so whichever process queues, admits or completes it writes into the
 *   same trace. `admitted` spans are written by the process that admitted that attempt, live; the
 *   root span (`execution`), `submitted` and `completed` by the process that made the terminal
 *   change, once it is final (a span is exported only when it has ended, and the root span ends last).
 * - an HTTP request: a Fastify onRequest/onResponse pair, the child of an incoming `traceparent`.
 * - a background pass: one span per pass of the loop helper (`loop:pass`) that failed, or per
 *   every pass with BATON_TRACE_PASSES=all.
 */
import {
  diag,
  DiagLogLevel,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, RandomIdGenerator, type IdGenerator } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import {
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVICE_INSTANCE_ID,
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_VERSION,
  ATTR_URL_PATH,
} from '@opentelemetry/semantic-conventions';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import type { TracePasses } from '../config.ts';
import { isTerminal } from '../domain/states.ts';
import { executionTrace, parseTraceparent } from '../domain/trace.ts';
import type { Engine } from '../engine/engine.ts';
import type { EngineEventMap } from '../engine/events.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { VERSION } from '../version.ts';

export interface TracingOptions {
  engine: Engine;
  app: FastifyInstance;
  nodeId: string;
  /** Export failures are logged here at warn level (the SDK is silent otherwise). */
  logger?: Logger | false;
  /** Which background passes become spans (BATON_TRACE_PASSES, default `errors`). */
  passes?: TracePasses;
}

export interface Tracing {
  /** Export every ended span now (tests; `baton up` does it on stop). */
  flush(): Promise<void>;
  /** Stop listening, wait for spans being built, export the rest. */
  shutdown(): Promise<void>;
}

/** What the terminal spans need of the row: read by primary key, without the (possibly large) bodies. */
const TERMINAL_COLUMNS = [
  'id',
  'agent',
  'status',
  'trigger_kind',
  'schedule_id',
  'priority',
  'attempt',
  'created_at',
  'started_at',
  'completed_at',
  'error_code',
  'retry_of',
  'retry_root',
  'retry_number',
] as const satisfies ReadonlyArray<keyof ExecutionRow>;
type TerminalRow = Pick<ExecutionRow, (typeof TERMINAL_COLUMNS)[number]>;

/**
 * The SDK asks its IdGenerator for ids as it starts a span (synchronously, in startSpan). An
 * execution's root span, whose ids are fixed, is started between `fix()` and `clear()`; every
 * other span gets random ids.
 */
class FixableIds implements IdGenerator {
  private readonly random = new RandomIdGenerator();
  private fixed: { traceId: string; spanId: string } | undefined;
  fix(ids: { traceId: string; spanId: string }): void {
    this.fixed = ids;
  }
  clear(): void {
    this.fixed = undefined;
  }
  generateTraceId(): string {
    return this.fixed?.traceId ?? this.random.generateTraceId();
  }
  generateSpanId(): string {
    return this.fixed?.spanId ?? this.random.generateSpanId();
  }
}

/** The execution's root span as a remote parent: children written by any process hang under it. */
function executionContext(id: string): Context {
  const { traceId, spanId } = executionTrace(id);
  return trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId, traceFlags: TraceFlags.SAMPLED, isRemote: true });
}

/** A link to another execution's root span (a retry points at the run it retries, and at the first run). */
function linkTo(id: string, relation: string): Link {
  const { traceId, spanId } = executionTrace(id);
  return { context: { traceId, spanId, traceFlags: TraceFlags.SAMPLED, isRemote: true }, attributes: { 'baton.link': relation } };
}

const at = (ms: number) => new Date(Number(ms));

export function startTracing(opts: TracingOptions): Tracing {
  const { engine, app, logger } = opts;
  if (logger) {
    diag.setLogger(
      {
        error: (msg, ...args) => logger.warn({ otel: args }, `opentelemetry: ${msg}`),
        warn: (msg, ...args) => logger.warn({ otel: args }, `opentelemetry: ${msg}`),
        info: () => {},
        debug: () => {},
        verbose: () => {},
      },
      { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
    );
  }
  const ids = new FixableIds();
  // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (the env detector) win over Baton's own defaults.
  const resource = defaultResource()
    .merge(
      resourceFromAttributes({ [ATTR_SERVICE_NAME]: 'baton', [ATTR_SERVICE_VERSION]: VERSION, [ATTR_SERVICE_INSTANCE_ID]: opts.nodeId }),
    )
    .merge(detectResources({ detectors: [envDetector] }));
  // The exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT and _COMPRESSION itself.
  const provider = new NodeTracerProvider({
    resource,
    idGenerator: ids,
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  const tracer: Tracer = provider.getTracer('baton', VERSION);

  const at = (ms: number) => new Date(Number(ms));

  // ── executions ──
  const onAdmitted: (...a: EngineEventMap['execution:admitted']) => void = (rows) => {
    for (const r of rows) {
      const span = tracer.startSpan(
        'admitted',
        {
          kind: SpanKind.INTERNAL,
          startTime: at(r.queued_at ?? r.created_at),
          attributes: {
            'baton.execution.id': r.id,
            'baton.agent': r.agent,
            'baton.attempt': r.attempt,
            'baton.lease_owner': r.lease_owner ?? '',
          },
        },
        executionContext(r.id),
      );
      span.end(at(r.started_at ?? engine.now()));
    }
  };

  // Only a change this process made: with several processes on one database every one of them
  // hears every change, and exactly one of them must write the terminal spans.
  const pending = new Set<Promise<void>>();
  const onChanged: (...a: EngineEventMap['execution:changed']) => void = ({ id, status, local }) => {
    if (!local || !isTerminal(status)) return;
    const p = engine.store.db
      .selectFrom('executions')
      .select(TERMINAL_COLUMNS)
      .where('id', '=', id)
      .executeTakeFirst()
      .then((row) => row && writeTerminalSpans(tracer, ids, engine, row))
      .catch((err: unknown) => diag.warn(`execution ${id}: spans not written`, err))
      .finally(() => pending.delete(p));
    pending.add(p);
  };

  // ── background passes ──
  const everyPass = opts.passes === 'all';
  const onPass: (...a: EngineEventMap['loop:pass']) => void = ({ loop, startedAt, durationMs, error }) => {
    if (error === undefined && !everyPass) return;
    const span = tracer.startSpan(
      `pass ${loop}`,
      { kind: SpanKind.INTERNAL, startTime: at(startedAt), attributes: { 'baton.loop': loop } },
      ROOT_CONTEXT,
    );
    if (error !== undefined) {
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    }
    span.end(at(startedAt + durationMs));
  };

  engine.events.on('execution:admitted', onAdmitted);
  engine.events.on('execution:changed', onChanged);
  engine.events.on('loop:pass', onPass);

  traceRequests(app, tracer);

  let stopping: Promise<void> | undefined;
  return {
    flush: () => provider.forceFlush(),
    shutdown() {
      stopping ??= (async () => {
        engine.events.off('execution:admitted', onAdmitted);
        engine.events.off('execution:changed', onChanged);
        engine.events.off('loop:pass', onPass);
        await Promise.all(pending);
        await provider.shutdown();
      })();
      return stopping;
    },
  };
}

/** An execution's spans once it is final: its root, `submitted`, and `completed` (its last run). */
function writeTerminalSpans(tracer: Tracer, ids: FixableIds, engine: { now(): number }, r: TerminalRow): void {
  const end = at(r.completed_at ?? engine.now());
  const base: Attributes = { 'baton.execution.id': r.id, 'baton.agent': r.agent };
  const links: Link[] = [];
  if (r.retry_of) links.push(linkTo(r.retry_of, 'retry_of'));
  if (r.retry_root && r.retry_root !== r.retry_of) links.push(linkTo(r.retry_root, 'retry_root'));
  ids.fix(executionTrace(r.id));
  let root: Span;
  try {
    root = tracer.startSpan(
      'execution',
      {
        kind: SpanKind.INTERNAL,
        root: true,
        startTime: at(r.created_at),
        links,
        attributes: {
          ...base,
          'baton.status': r.status,
          'baton.trigger': r.trigger_kind,
          'baton.attempt': r.attempt,
          'baton.retry_number': r.retry_number,
          ...(r.schedule_id ? { 'baton.schedule_id': r.schedule_id } : {}),
          ...(r.error_code ? { 'baton.error.code': r.error_code } : {}),
        },
      },
      ROOT_CONTEXT,
    );
  } finally {
    ids.clear();
  }
  const parent = trace.setSpan(ROOT_CONTEXT, root);
  tracer
    .startSpan(
      'submitted',
      { startTime: at(r.created_at), attributes: { ...base, 'baton.trigger': r.trigger_kind, 'baton.priority': r.priority } },
      parent,
    )
    .end(at(r.created_at));
  const completed = tracer.startSpan(
    'completed',
    {
      // The last run, from its admission to its end; a run never admitted (cancelled while queued) is an instant.
      startTime: at(r.started_at ?? r.completed_at ?? engine.now()),
      attributes: { ...base, 'baton.status': r.status, ...(r.error_code ? { 'baton.error.code': r.error_code } : {}) },
    },
    parent,
  );
  if (r.status === 'failed') {
    completed.setStatus({ code: SpanStatusCode.ERROR, message: r.error_code ?? r.status });
    root.setStatus({ code: SpanStatusCode.ERROR, message: r.error_code ?? r.status });
  }
  completed.end(end);
  root.end(end);
}

/** A server span per HTTP request, named by its route pattern, child of the caller's traceparent. */
function traceRequests(app: FastifyInstance, tracer: Tracer): void {
  const spans = new WeakMap<FastifyRequest, Span>();
  app.addHook('onRequest', async (req) => {
    const remote = parseTraceparent(req.headers.traceparent as string | undefined);
    const parent = remote
      ? trace.setSpanContext(ROOT_CONTEXT, {
          traceId: remote.traceId,
          spanId: remote.spanId,
          traceFlags: remote.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE,
          isRemote: true,
        })
      : ROOT_CONTEXT;
    // The route pattern, not the path: /v1/executions/:id is one span name, not one per execution.
    const route = req.routeOptions.url;
    const span = tracer.startSpan(
      route ? `${req.method} ${route}` : req.method,
      {
        kind: SpanKind.SERVER,
        attributes: {
          [ATTR_HTTP_REQUEST_METHOD]: req.method,
          [ATTR_URL_PATH]: req.url.split('?')[0]!,
          ...(route ? { [ATTR_HTTP_ROUTE]: route } : {}),
        },
      },
      parent,
    );
    spans.set(req, span);
  });
  const endRequest = (req: FastifyRequest, status?: number) => {
    const span = spans.get(req);
    if (!span) return;
    spans.delete(req);
    if (status !== undefined) span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status);
    if (status === undefined || status >= 500)
      span.setStatus({ code: SpanStatusCode.ERROR, message: status ? String(status) : 'request aborted' });
    span.end();
  };
  app.addHook('onResponse', async (req, reply) => endRequest(req, reply.statusCode));
  app.addHook('onRequestAbort', async (req) => endRequest(req));
}
