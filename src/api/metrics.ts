import type { FastifyInstance } from 'fastify';
import { Counter, Gauge } from 'prom-client';
import type { RetentionEnv } from '../config.ts';
import type { Engine } from '../engine/engine.ts';
import { createNodeMetrics } from '../metrics.ts';
import type { UnreadLedger } from './slow-readers.ts';

/**
 * GET /metrics (Prometheus text, no API key: bind Baton to a private address or put the scrape
 * behind your proxy) and the HTTP request histogram. Call on the root instance before routes
 * are registered, so the hook sees every route.
 */
export function registerMetrics(app: FastifyInstance, engine: Engine, retention: RetentionEnv, unread: UnreadLedger): void {
  const metrics = createNodeMetrics(engine, retention);
  new Gauge({
    name: 'baton_http_unread_bytes',
    help: 'Bytes of answers this process holds for clients that have not read them yet (bounded by BATON_MAX_UNREAD_MIB)',
    registers: [metrics.registry],
    collect() {
      this.set(unread.bytes);
    },
  });
  new Counter({
    name: 'baton_http_sliced_answers_total',
    help: 'Large answers this process sent a slice at a time, as their clients read them',
    registers: [metrics.registry],
    collect() {
      this.reset();
      this.inc(unread.answers);
    },
  });
  const closed = new Counter({
    name: 'baton_http_slow_readers_closed_total',
    help: 'Connections closed for not reading their answers, by bound (connection: BATON_MAX_UNREAD_MIB_PER_CONNECTION; total: BATON_MAX_UNREAD_MIB)',
    labelNames: ['bound'] as const,
    registers: [metrics.registry],
  });
  unread.onClose = (bound) => closed.inc({ bound });
  // A callback, not a promise: this runs for every request.
  app.addHook('onResponse', (req, reply, done) => {
    const route = req.routeOptions?.url ?? 'unmatched';
    metrics.observeHttp(req.method, route, reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
  app.addHook('onClose', async () => metrics.close());
  app.get('/metrics', { schema: { hide: true } }, async (_req, reply) => {
    const out = await metrics.render();
    return reply.header('content-type', out.contentType).send(out.body);
  });
}
