import type { FastifyInstance } from 'fastify';
import type { RetentionEnv } from '../config.ts';
import type { Engine } from '../engine/engine.ts';
import { createNodeMetrics } from '../metrics.ts';

/**
 * GET /metrics (Prometheus text, no API key: bind Baton to a private address or put the scrape
 * behind your proxy) and the HTTP request histogram. Call on the root instance before routes
 * are registered, so the hook sees every route.
 */
export function registerMetrics(app: FastifyInstance, engine: Engine, retention: RetentionEnv): void {
  const metrics = createNodeMetrics(engine, retention);
  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions?.url ?? 'unmatched';
    metrics.observeHttp(req.method, route, reply.statusCode, reply.elapsedTime / 1000);
  });
  app.addHook('onClose', async () => metrics.close());
  app.get('/metrics', { schema: { hide: true } }, async (_req, reply) => {
    const out = await metrics.render();
    return reply.header('content-type', out.contentType).send(out.body);
  });
}
