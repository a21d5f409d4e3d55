import swagger from '@fastify/swagger';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyRequest } from 'fastify';
import { validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import { DEFAULTS, RETENTION_DEFAULTS, type HookRates, type RetentionEnv, type TrustedProxy } from '../config.ts';
import { reportingCanary, type Canary } from '../canary/service.ts';
import { BatonError } from '../domain/errors.ts';
import { infiniteMessage, jsonShape, LARGE_JSON_CHARS, MAX_JSON_VALUES, tooDeepMessage, tooManyValuesMessage } from '../domain/json.ts';
import { authenticate } from './auth.ts';
import { guardConnections, proxyMatcher } from './connections.ts';
import { boundUnreadAnswers, UnreadLedger } from './slow-readers.ts';
import { AnswerLane, laneLargeAnswers } from './answer-lane.ts';
import { parseAroundRawPaths, parseBytesAroundRawPaths, parseMeasured } from './json-off-thread.ts';
import { readChunks } from './body-chunks.ts';
import { lazyRequestLogger } from './request-logger.ts';
import { declareCommonAnswers, openApiTransform } from './contract.ts';
import type { ApiDeps, ConnectionLimits } from './deps.ts';
import { registerMetrics } from './metrics.ts';
import { canaryRoutes } from './routes/canary.ts';
import { historyRoutes } from './routes/history.ts';
import { clientErrorHandler, errorHandler, notFoundHandler } from './errors.ts';
import { agentRoutes } from './routes/agents.ts';
import { poolRoutes } from './routes/pools.ts';
import { activityRoutes } from './routes/activity.ts';
import { eventRoutes } from './routes/events.ts';
import { executionRoutes } from './routes/executions.ts';
import { batchRoutes } from './routes/batch.ts';
import { keyRoutes } from './routes/keys.ts';
import { logRoutes } from './routes/logs.ts';
import { workerRoutes } from './routes/worker.ts';
import { hookRoutes } from './routes/hooks.ts';
import { scheduleRoutes } from './routes/schedules.ts';
import { groupRoutes } from './routes/groups.ts';
import { subscriptionRoutes } from './routes/subscriptions.ts';
import { webhookRoutes } from './routes/webhooks.ts';
import { mcpRoutes } from '../mcp/http.ts';
import { VERSION } from '../version.ts';
import { webRoutes } from './web.ts';

export type { ApiDeps, ConnectionLimits };

export interface ServerOptions extends ApiDeps {
  logger?: Logger | false;
  /** Set once migrations ran; /readyz also checks the store answers. */
  isReady?: () => boolean;
  /** The node's canary (GET /v1/canary…). Default: one with no timer, reporting the stored state. */
  canary?: Canary;
  /** Retention settings shown on GET /v1/history and /metrics (default: RETENTION_DEFAULTS; `baton up`: the environment's). */
  retention?: RetentionEnv;
  /** Webhook rate limits per second (default 50 each; `baton up`: BATON_HOOK_RATE_*). */
  hookRates?: Partial<HookRates>;
  /** Connection limits (defaults: CONNECTION_LIMITS). */
  limits?: Partial<ConnectionLimits>;
  /**
   * Proxies whose X-Forwarded-For names the client: its address, not the proxy's, is `req.ip`
   * for the per-address limits, webhook rates and logs (default none; `baton up`: BATON_TRUSTED_PROXIES).
   */
  trustedProxies?: readonly TrustedProxy[];
}

export const CONNECTION_LIMITS: ConnectionLimits = Object.freeze({
  requestTimeoutMs: 30_000,
  headersTimeoutMs: 10_000,
  maxConnectionsPerAddress: DEFAULTS.maxConnectionsPerAddress,
  maxUnreadBytes: DEFAULTS.maxUnreadMiB * 1024 * 1024,
  maxUnreadBytesPerConnection: DEFAULTS.maxUnreadMiBPerConnection * 1024 * 1024,
});

export async function buildServer(opts: ServerOptions): Promise<FastifyInstance> {
  return buildApp(opts) as unknown as Promise<FastifyInstance>;
}

async function buildApp(opts: ServerOptions) {
  const limits: ConnectionLimits = { ...CONNECTION_LIMITS, ...opts.limits };
  const trusted = proxyMatcher(opts.trustedProxies ?? []);
  const app = Fastify({
    // Only a trusted peer's X-Forwarded-For is read (each hop must be trusted to read the one
    // before it); anyone else's header is ignored, so a client cannot choose its own address.
    trustProxy: (address: string) => trusted(address),
    loggerInstance: (opts.logger || undefined) as FastifyBaseLogger | undefined,
    // One log line per request would cost more than the request on the worker protocol.
    logController: new LogController({ disableRequestLogging: true }),
    // A request's logger is made when it first logs (request-logger.ts).
    childLoggerFactory: lazyRequestLogger,
    bodyLimit: 1024 * 1024,
    // Long-poll claims wait up to 60 s; keep sockets open past that.
    keepAliveTimeout: 75_000,
    requestTimeout: limits.requestTimeoutMs,
    // Node checks the two timeouts on this interval (default 30 s, which would let a trickle live
    // for a minute): a second's precision for a few microseconds per open socket.
    http: { headersTimeout: limits.headersTimeoutMs, connectionsCheckingInterval: Math.min(1_000, limits.requestTimeoutMs) },
    return503OnClosing: true,
    // Malformed URLs are refused by the router, before the error handler: answer in our vocabulary.
    // A reply is thenable, not a promise: nothing is left to reject unobserved once it is sent.
    frameworkErrors: (err, req, reply) => void errorHandler(err, req, reply),
    // What Node's parser refuses before that (a malformed header, a slow request): in our vocabulary too.
    clientErrorHandler,
  }).withTypeProvider<ZodTypeProvider>();

  app.setValidatorCompiler(validatorCompiler);
  // Responses are typed at compile time by the schemas; serialising without re-validating keeps
  // the worker protocol fast. The schemas still document every response in /openapi.json.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  // A write refused for lack of disk space marks the store full (GET /readyz) before it is answered.
  app.setErrorHandler((err: FastifyError, req, reply) => {
    opts.engine.space.failed(err);
    return errorHandler(err, req, reply);
  });
  app.setNotFoundHandler(notFoundHandler);
  guardConnections(app as unknown as FastifyInstance, limits, trusted);
  const unread = new UnreadLedger(limits);
  boundUnreadAnswers(app as unknown as FastifyInstance, unread);
  laneLargeAnswers(app as unknown as FastifyInstance, new AnswerLane());

  acceptBodies(app as unknown as FastifyInstance);

  await app.register(swagger, {
    openapi: {
      info: { title: 'Baton API', version: VERSION, description: 'Crash-safe execution control plane for AI agents' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    transform: openApiTransform,
  });

  declareCommonAnswers(app as unknown as FastifyInstance);
  const retention = opts.retention ?? { ...RETENTION_DEFAULTS, archiveDir: undefined };
  registerMetrics(app as unknown as FastifyInstance, opts.engine, retention, unread);
  app.get('/healthz', { schema: { hide: true } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { schema: { hide: true } }, async (_req, reply) => {
    if (opts.isReady && !opts.isReady())
      return reply.code(503).send({ status: 'starting', error: 'unavailable', message: 'migrations have not finished' });
    try {
      const status = await opts.engine.storeStatus();
      if (!status.migrated)
        return reply.code(503).send({ status: 'not_migrated', error: 'unavailable', message: 'database migrations are not current' });
      if (status.fullSince !== undefined)
        return reply.code(503).send({
          status: 'store_full',
          error: 'unavailable',
          message: `the database's disk is full: writes fail for lack of space (since ${new Date(status.fullSince).toISOString()})`,
        });
      return { status: 'ready', store: status.kind };
    } catch {
      return reply.code(503).send({ status: 'store_unreachable', error: 'unavailable', message: 'the store did not answer' });
    }
  });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  const deps: ApiDeps = { engine: opts.engine, keys: opts.keys, idempotency: opts.idempotency };
  await app.register(mcpRoutes, { keys: opts.keys, root: () => app as unknown as FastifyInstance });
  await app.register(webRoutes);
  await app.register(hookRoutes, {
    engine: opts.engine,
    perAddressRate: opts.hookRates?.perAddress,
    perWebhookRate: opts.hookRates?.perWebhook,
    idempotency: opts.idempotency,
  }); // /hooks/<token>: its own body parser, no API key
  await app.register(async (v1) => {
    v1.addHook('onRequest', authenticate(opts.keys));
    await v1.register(agentRoutes, deps);
    await v1.register(poolRoutes, deps);
    await v1.register(activityRoutes, deps);
    await v1.register(executionRoutes, deps);
    await v1.register(batchRoutes, deps);
    await v1.register(workerRoutes, deps);
    await v1.register(keyRoutes, deps);
    await v1.register(canaryRoutes, {
      ...deps,
      canary: opts.canary ?? reportingCanary(opts.engine),
    });
    await v1.register(historyRoutes, { ...deps, retention });
    await v1.register(logRoutes, deps);
    await v1.register(eventRoutes, deps);
    await v1.register(scheduleRoutes, deps);
    await v1.register(groupRoutes, deps);
    await v1.register(subscriptionRoutes, deps);
    await v1.register(webhookRoutes, deps);
  });
  return app;
}

/**
 * How request bodies are read: JSON only, checked before it is parsed, large ones parsed off the
 * event loop or between its turns, and compressed ones refused.
 */
function acceptBodies(app: FastifyInstance): void {
  // JSON bodies: refused before anything recursive sees them when nested too deep (JSON.stringify
  // and redaction would overflow the stack: a 500, or an execution left running), or when they
  // hold more values than one step of the event loop should parse (MAX_JSON_VALUES). Only JSON is
  // accepted on these routes: Fastify's default text/plain parser would turn a non-JSON body into
  // a string and the schema would answer 400 instead of 415 (/hooks has its own parser).
  const parseJson = app.getDefaultJsonParser('error', 'error');
  const largeBodies = new WeakSet<object>();
  const parseText = (req: FastifyRequest, body: string, done: (err: Error | null, value: unknown) => void) => {
    // A JSON body past LARGE_JSON_CHARS gets a turn of the event loop between its parsing and its handler.
    if (body.length > LARGE_JSON_CHARS) largeBodies.add(req);
    const shape = jsonShape(body);
    if (shape.tooDeep) return done(new BatonError('validation_error', tooDeepMessage('body')), undefined);
    if (shape.values > MAX_JSON_VALUES)
      return done(new BatonError('payload_too_large', tooManyValuesMessage('body', shape.values)), undefined);
    if (shape.infinite) return done(new BatonError('validation_error', infiniteMessage('body')), undefined);
    // A large body's values that its route only stores are parsed on a worker thread.
    // Any other large body is measured there first (parseMeasured), never parsed here if costly.
    if (largeBodies.has(req)) {
      const raw = req.routeOptions.config.rawJsonPaths;
      (raw ? parseAroundRawPaths(body, raw, parser(req)) : parseMeasured(body, 'body', parser(req))).then(
        (value) => done(null, value),
        (err: Error) => done(err, undefined),
      );
      return;
    }
    // Synchronous: it answers through done. (Its type also allows the promise form it never takes.)
    void parseJson(req, body, done);
  };
  const parser = (req: FastifyRequest) => (text: string) =>
    new Promise<unknown>((resolve, reject) => void parseJson(req, text, (err, value) => (err ? reject(err) : resolve(value))));
  app.addContentTypeParser('application/json', (req, payload, done) => {
    readChunks(req, payload, (err, chunks, length) => {
      if (err) return done(err, undefined);
      const raw = req.routeOptions.config.rawJsonPaths;
      // A large body of a route that only stores its large values: decoded and scanned on the JSON
      // thread from the chunks it came in (parseBytesAroundRawPaths); any other, decoded here.
      if (raw && length > LARGE_JSON_CHARS) {
        largeBodies.add(req);
        const asText = (text: string) =>
          new Promise<unknown>((resolve, reject) => parseText(req, text, (e, v) => (e ? reject(e) : resolve(v))));
        parseBytesAroundRawPaths(chunks, raw, parser(req), asText).then(
          (value) => done(null, value),
          (e: Error) => done(e, undefined),
        );
        return;
      }
      parseText(req, chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks, length).toString('utf8'), done);
    });
  });
  app.removeContentTypeParser('text/plain');
  // Bodies come as they are sent: a Content-Encoding (gzip, br) is not undone here, so such a body
  // would be read as its compressed bytes (or, mislabelled, as text it does not say it is). Refused
  // before it is read, on every route that takes one.
  // (A callback, not a promise: this runs for every request.)
  app.addHook('onRequest', (req, reply, done) => {
    const encoding = req.headers['content-encoding']?.trim().toLowerCase();
    if (!encoding || encoding === 'identity') return done();
    const length = req.headers['content-length'];
    if (req.headers['transfer-encoding'] === undefined && (length === undefined || length === '0')) return done();
    // Answered here: the request goes no further (done is not called).
    void reply.code(415).send({
      error: 'unsupported_media_type',
      message: `body: send it uncompressed (Content-Encoding was ${JSON.stringify(encoding.slice(0, 50))})`,
    });
  });
  // A large body was parsed and validated in one turn of the event loop; its handler (which
  // serialises, redacts and writes it) runs in the next, so other requests are served between.
  app.addHook('preHandler', (req, _reply, done) => {
    if (largeBodies.has(req)) setImmediate(done);
    else done();
  });
}
