import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { iso } from '../../engine/views.ts';
import { requireAgentAccess } from '../auth.ts';
import { AgentParams, ErrorBody } from '../schemas.ts';
import { ActivityQuery, AgentSeats, AgentSeries } from '../schemas/activity.ts';
import type { ApiDeps } from '../deps.ts';

/** An agent's activity over time, for the dashboard's charts. Bounded reads (src/engine/agent-activity.ts). */
export const activityRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, { engine }) => {
  app.get(
    '/v1/agents/:agent/series',
    {
      config: { agentKeys: true },
      schema: {
        tags: ['agents'],
        summary: 'Completions, failures, duration p50/p95, queue depth and seats in use over a window, in 60 buckets',
        params: AgentParams,
        querystring: ActivityQuery,
        response: { 200: AgentSeries, 400: ErrorBody, 403: ErrorBody, 404: ErrorBody },
      },
    },
    async (req) => {
      requireAgentAccess(req, req.params.agent);
      const { window } = req.query;
      const s = await engine.agents.series(req.params.agent, window);
      return {
        agent: req.params.agent,
        window,
        from: iso(s.from)!,
        to: iso(s.to)!,
        bucket_ms: s.bucket_ms,
        max_parallel: s.max_parallel,
        complete_from: iso(s.complete_from),
        buckets: s.buckets.map((b) => ({ ...b, start: iso(b.start)! })),
      };
    },
  );

  app.get(
    '/v1/agents/:agent/seats',
    {
      config: { agentKeys: true },
      schema: {
        tags: ['agents'],
        summary: 'Seat timeline: which execution held which seat when over a window, and what waits now',
        params: AgentParams,
        querystring: ActivityQuery,
        response: { 200: AgentSeats, 400: ErrorBody, 403: ErrorBody, 404: ErrorBody },
      },
    },
    async (req) => {
      requireAgentAccess(req, req.params.agent);
      const { window } = req.query;
      const s = await engine.agents.seats(req.params.agent, window);
      return {
        agent: req.params.agent,
        window,
        from: iso(s.from)!,
        to: iso(s.to)!,
        max_parallel: s.max_parallel,
        seats_used: s.seats_used,
        truncated: s.truncated,
        intervals: s.intervals.map((r) => ({
          execution_id: r.id,
          seat: r.seat,
          status: r.status,
          attempt: r.attempt,
          owner: r.owner,
          queued_at: iso(r.queued_at),
          started_at: iso(r.started_at)!,
          ended_at: iso(r.ended_at),
        })),
        waiting: s.waiting.map((w) => ({ execution_id: w.id, queued_at: iso(w.queued_at), run_after: iso(w.run_after) })),
      };
    },
  );
};
