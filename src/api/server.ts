import swagger from '@fastify/swagger';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { jsonSchemaTransform, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import type { KeyStore } from '../auth/keys.ts';
import type { Engine } from '../engine/engine.ts';
import { Canary } from '../canary/service.ts';
import { authenticate } from './auth.ts';
import { registerMetrics } from './metrics.ts';
import { canaryRoutes } from './routes/canary.ts';
import { errorHandler, notFoundHandler } from './errors.ts';
import { agentRoutes } from './routes/agents.ts';
import { eventRoutes } from './routes/events.ts';
import { executionRoutes } from './routes/executions.ts';
import { keyRoutes } from './routes/keys.ts';
import { logRoutes } from './routes/logs.ts';
import { workerRoutes } from './routes/worker.ts';
import { hookRoutes } from './routes/hooks.ts';
import { scheduleRoutes } from './routes/schedules.ts';
import { webhookRoutes } from './routes/webhooks.ts';
import { mcpRoutes } from '../mcp/http.ts';
import { webRoutes } from '../server/web.ts';

export interface ApiDeps {
  engine: Engine;
  keys: KeyStore;
}

export interface ServerOptions extends ApiDeps {
  logger?: Logger | false;
  /** Set once migrations ran; /readyz also checks the store answers. */
  isReady?: () => boolean;
  /** The node's canary (GET /v1/canary…). Default: one with no timer, reporting the stored state. */
  canary?: Canary;
}

export const API_VERSION = '0.1.0';

export async function buildServer(opts: ServerOptions): Promise<FastifyInstance> {
  return buildApp(opts) as unknown as Promise<FastifyInstance>;
}

async function buildApp(opts: ServerOptions) {
  const app = Fastify({
    loggerInstance: (opts.logger || undefined) as FastifyBaseLogger | undefined,
    // One log line per request would cost more than the request on the worker protocol.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 1024 * 1024,
    // Long-poll claims wait up to 60 s; keep sockets open past that.
    keepAliveTimeout: 75_000,
    requestTimeout: 0,
    return503OnClosing: true,
    // Malformed URLs are refused by the router, before the error handler: answer in our vocabulary.
    frameworkErrors: errorHandler,
  }).withTypeProvider<ZodTypeProvider>();

  app.setValidatorCompiler(validatorCompiler);
  // Responses are typed at compile time by the schemas; serialising without re-validating keeps
  // the worker protocol fast. The schemas still document every response in /openapi.json.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler(notFoundHandler);

  await app.register(swagger, {
    openapi: {
      info: { title: 'Baton API', version: API_VERSION, description: 'Crash-safe execution control plane for AI agents' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    transform: jsonSchemaTransform,
  });

  registerMetrics(app as unknown as FastifyInstance, opts.engine);
  app.get('/healthz', { schema: { hide: true } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { schema: { hide: true } }, async (_req, reply) => {
    if (opts.isReady && !opts.isReady()) return reply.code(503).send({ status: 'starting', error: 'unavailable', message: 'migrations have not finished' });
    try {
      const { applied, known } = await opts.engine.store.migrationStatus();
      const current = known.every((v) => applied.includes(v));
      if (!current) return reply.code(503).send({ status: 'not_migrated', error: 'unavailable', message: 'database migrations are not current' });
      return { status: 'ready', store: opts.engine.store.kind };
    } catch {
      return reply.code(503).send({ status: 'store_unreachable', error: 'unavailable', message: 'the store did not answer' });
    }
  });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  const deps: ApiDeps = { engine: opts.engine, keys: opts.keys };
  await app.register(mcpRoutes, { keys: opts.keys, root: () => app as unknown as FastifyInstance });
  await app.register(webRoutes);
  await app.register(hookRoutes, { engine: opts.engine }); // /hooks/<token>: its own body parser, no API key
  await app.register(async (v1) => {
    v1.addHook('onRequest', authenticate(opts.keys));
    await v1.register(agentRoutes, deps);
    await v1.register(executionRoutes, deps);
    await v1.register(workerRoutes, deps);
    await v1.register(keyRoutes, deps);
    await v1.register(canaryRoutes, { ...deps, canary: opts.canary ?? new Canary({ store: opts.engine.store, nodeId: opts.engine.nodeId, intervalMs: 0 }) });
    await v1.register(logRoutes, deps);
    await v1.register(eventRoutes, deps);
    await v1.register(scheduleRoutes, deps);
    await v1.register(webhookRoutes, deps);
  });
  return app;
}
