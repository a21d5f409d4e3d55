import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Canary } from '../../canary/service.ts';
import { iso } from '../../engine/views.ts';
import { ErrorBody } from '../schemas.ts';
import { CanaryRunBody, CanaryRunQuery, CanaryStatus, CycleReport, ViolationPage, ViolationsQuery } from '../schemas/canary.ts';
import type { ApiDeps } from '../deps.ts';

/** The canary's state. Admin keys only: violations name executions of every agent. */
export const canaryRoutes: FastifyPluginAsyncZod<ApiDeps & { canary: Canary }> = async (app, { canary }) => {
  app.get(
    '/v1/canary',
    {
      schema: {
        tags: ['canary'],
        summary: 'Canary status: disabled | healthy | violated | stale, with open violations',
        response: { 200: CanaryStatus, 403: ErrorBody },
      },
    },
    async () => {
      return { ...(await canary.status()), failed_alerts: await canary.failedAlerts() };
    },
  );

  app.get(
    '/v1/canary/violations',
    {
      schema: {
        tags: ['canary'],
        summary: 'Violation history (default: open), newest first',
        querystring: ViolationsQuery,
        response: { 200: ViolationPage, 400: ErrorBody, 403: ErrorBody },
      },
    },
    async (req) => {
      const q = req.query;
      const limit = q.limit ?? 50;
      const violations = await canary.violations({ ...q, limit });
      return { violations, next_before: violations.length === limit ? violations[violations.length - 1]!.id : null };
    },
  );

  app.post(
    '/v1/canary/run',
    {
      schema: {
        tags: ['canary'],
        summary:
          'Run one canary cycle now and return what it found; `full` judges all history (in bounded chunks: takes longer on a large database)',
        querystring: CanaryRunQuery,
        body: CanaryRunBody, // a bare POST arrives as null
        response: { 200: CycleReport, 400: ErrorBody, 403: ErrorBody },
      },
    },
    async (req) => {
      const r = await canary.runOnce({ full: req.query.full ?? req.body?.full ?? false });
      return { ...r, started_at: iso(r.started_at)!, completed_at: iso(r.completed_at)! };
    },
  );
};
