import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { parseBudget } from '../../domain/budget.ts';
import { parseThrottle } from '../../domain/throttle.ts';
import type { PoolUsage as Usage } from '../../engine/pool-service.ts';
import { iso } from '../../engine/views.ts';
import type { PoolRow } from '../../store/schema.ts';
import { actorOf } from '../auth.ts';
import type { ApiDeps } from '../deps.ts';
import { ErrorBody, NoBody } from '../schemas.ts';
import { Pool, PoolCreate, PoolList, PoolParams, PoolPatch, PoolUsage } from '../schemas/pools.ts';

export const poolView = (p: PoolRow) => ({
  name: p.name,
  description: p.description,
  max_parallel: p.max_parallel,
  throttle: parseThrottle(p.throttle),
  budget: parseBudget(p.budget),
  created_at: iso(p.created_at)!,
  updated_at: iso(p.updated_at)!,
});

export const poolUsageView = (u: Usage) => ({
  ...poolView(u.pool),
  agents: u.agents,
  in_use: u.in_use,
  throttle_next_admit_at: iso(u.throttle_next_admit_at),
  budget_limits: u.budget_limits.map((l) => ({
    metric: l.metric,
    window: l.window,
    limit: l.limit,
    spent: l.spent,
    remaining: l.remaining,
    spent_ratio: l.spent / l.limit,
    window_start: iso(l.window_start)!,
    resets_at: iso(l.resets_at)!,
  })),
});

/** Pools (src/domain/pools.ts): limits several agents draw from. Admin keys only. */
export const poolRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, { engine }) => {
  app.post(
    '/v1/pools',
    {
      schema: {
        tags: ['pools'],
        summary: 'Create a pool: seats, a throttle and a budget shared by the agents that draw from it',
        body: PoolCreate,
        response: { 201: Pool, 400: ErrorBody, 409: ErrorBody },
      },
    },
    async (req, reply) => reply.code(201).send(poolView(await engine.pools.create(req.body, actorOf(req)))),
  );

  app.get('/v1/pools', { schema: { tags: ['pools'], summary: 'List pools in name order', response: { 200: PoolList } } }, async () => ({
    pools: (await engine.pools.list()).map(poolView),
  }));

  app.get(
    '/v1/pools/:pool',
    {
      schema: {
        tags: ['pools'],
        summary: 'A pool with its usage: the agents that draw from it, seats in use, when its throttle next admits, its budget windows',
        params: PoolParams,
        response: { 200: PoolUsage, 404: ErrorBody },
      },
    },
    async (req) => poolUsageView(await engine.pools.get(req.params.pool)),
  );

  app.patch(
    '/v1/pools/:pool',
    {
      schema: {
        tags: ['pools'],
        summary: "Change a pool's limits (lowering seats never stops running work; raising them admits at once)",
        params: PoolParams,
        body: PoolPatch,
        response: { 200: Pool, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (req) => poolView(await engine.pools.update(req.params.pool, req.body, actorOf(req))),
  );

  app.delete(
    '/v1/pools/:pool',
    {
      schema: {
        tags: ['pools'],
        summary: 'Delete a pool; refused (409 pool_in_use, naming them) while agents draw from it',
        params: PoolParams,
        body: NoBody,
        response: { 200: z.object({ deleted: z.string() }), 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (req) => {
      await engine.pools.delete(req.params.pool, actorOf(req));
      return { deleted: req.params.pool };
    },
  );
};
