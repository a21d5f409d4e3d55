import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { redactUrl } from '../../domain/urls.ts';
import { agentView, iso } from '../../engine/views.ts';
import type { FastifyRequest } from 'fastify';
import { actorOf, requireAgentAccess } from '../auth.ts';
import { CONFIG_PAGE } from '../../domain/lists.ts';
import { decodeNameCursor, encodeNameCursor } from '../cursors.ts';
import { Agent, AgentCreate, AgentList, AgentListQuery, AgentParams, AgentPatch, ErrorBody, NoBody } from '../schemas.ts';
import { PauseBody } from '../schemas/admission.ts';
import { BudgetAnswer } from '../schemas/budget.ts';
import { LiveKeys, LiveKeysQuery } from '../schemas/flow-keys.ts';
import type { ApiDeps, RouteApp } from '../deps.ts';

/** Admins see an agent as stored; an agent-scoped key sees its push URL without credentials. */
const forReader = (req: FastifyRequest, view: ReturnType<typeof agentView>) =>
  req.principal.scope === 'admin' ? view : { ...view, push_url: redactUrl(view.push_url) };

export const agentRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, deps) => {
  agentRecordRoutes(app, deps);
  agentControlRoutes(app, deps);
};

/** Register, list, read and change agents. */
function agentRecordRoutes(app: RouteApp, { engine }: ApiDeps): void {
  app.post(
    '/v1/agents',
    {
      schema: {
        tags: ['agents'],
        summary: 'Register an agent',
        body: AgentCreate,
        response: { 201: Agent, 400: ErrorBody, 409: ErrorBody },
      },
    },
    async (req, reply) => {
      await engine.agents.create(req.body, actorOf(req));
      // Its counts as read back: a name that was an agent's before carries that agent's work still running.
      const a = await engine.agents.get(req.body.name);
      return reply.code(201).send(agentView(a.agent, a));
    },
  );

  app.get(
    '/v1/agents',
    {
      config: { agentKeys: true },
      schema: {
        tags: ['agents'],
        summary: 'List agents with live running and queued counts, a page at a time in name order',
        querystring: AgentListQuery,
        response: { 200: AgentList, 400: ErrorBody },
      },
    },
    async (req) => {
      const limit = req.query.limit ?? CONFIG_PAGE.default;
      const after = req.query.cursor ? decodeNameCursor(req.query.cursor, 1)[0] : undefined;
      // An agent-scoped key sees its own agent, on the page where its name falls.
      const only = req.principal.scope === 'agent' ? (req.principal.agent ?? '') : undefined;
      const rows = await engine.agents.list({ limit, after, only });
      const last = rows[rows.length - 1];
      return {
        agents: rows.map((a) => forReader(req, agentView(a.agent, a))),
        next_cursor: rows.length === limit && last ? encodeNameCursor([last.agent.name]) : null,
      };
    },
  );

  app.get(
    '/v1/agents/:agent',
    {
      config: { agentKeys: true },
      schema: { tags: ['agents'], summary: 'Read one agent', params: AgentParams, response: { 200: Agent, 404: ErrorBody } },
    },
    async (req) => {
      requireAgentAccess(req, req.params.agent);
      const a = await engine.agents.get(req.params.agent);
      return forReader(req, agentView(a.agent, a));
    },
  );

  app.patch(
    '/v1/agents/:agent',
    {
      schema: {
        tags: ['agents'],
        summary: 'Change agent settings (lowering max_parallel never interrupts running work)',
        params: AgentParams,
        body: AgentPatch,
        response: { 200: Agent, 404: ErrorBody },
      },
    },
    async (req) => {
      await engine.agents.update(req.params.agent, req.body, actorOf(req));
      const a = await engine.agents.get(req.params.agent);
      return agentView(a.agent, a);
    },
  );
}

/** Pause, resume, close the breaker, read the budget, delete. */
function agentControlRoutes(app: RouteApp, { engine }: ApiDeps): void {
  app.post(
    '/v1/agents/:agent/pause',
    {
      schema: {
        tags: ['agents'],
        summary: 'Pause an agent: it admits nothing until resumed; its queue keeps filling and running work finishes (idempotent)',
        params: AgentParams,
        body: PauseBody,
        response: { 200: Agent, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (req) => {
      // Pausing a paused agent answers 200 with the first pause's who, why and since.
      await engine.agents.pause(req.params.agent, req.body.reason, actorOf(req));
      const a = await engine.agents.get(req.params.agent);
      return agentView(a.agent, a);
    },
  );

  app.post(
    '/v1/agents/:agent/resume',
    {
      schema: {
        tags: ['agents'],
        summary: 'Resume a paused agent: admission goes on at once (idempotent)',
        params: AgentParams,
        body: NoBody,
        response: { 200: Agent, 404: ErrorBody },
      },
    },
    async (req) => {
      await engine.agents.resume(req.params.agent, actorOf(req));
      const a = await engine.agents.get(req.params.agent);
      return agentView(a.agent, a);
    },
  );

  app.post(
    '/v1/agents/:agent/breaker/close',
    {
      schema: {
        tags: ['agents'],
        summary: "Close an agent's circuit breaker by hand: admission resumes at once and its failure counts start afresh (idempotent)",
        params: AgentParams,
        body: NoBody,
        response: { 200: Agent, 404: ErrorBody },
      },
    },
    async (req) => {
      await engine.agents.closeBreaker(req.params.agent, actorOf(req));
      const a = await engine.agents.get(req.params.agent);
      return agentView(a.agent, a);
    },
  );

  app.get(
    '/v1/agents/:agent/keys',
    {
      schema: {
        tags: ['agents'],
        summary: "An agent's live keys (a queued or running task): seats in use, queue depth, cap and throttle, in key order",
        params: AgentParams,
        querystring: LiveKeysQuery,
        response: { 200: LiveKeys, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (req) => {
      const page = await engine.agents.keys(req.params.agent, { limit: req.query.limit, after: req.query.cursor });
      return {
        agent: req.params.agent,
        keys: page.keys.map((k) => ({ ...k, throttled_until: iso(k.throttled_until) })),
        next_cursor: page.next,
      };
    },
  );

  app.get(
    '/v1/agents/:agent/budget',
    {
      config: { agentKeys: true },
      schema: {
        tags: ['agents'],
        summary: "An agent's budget: per limit, the current window's spending, what remains and when it resets",
        params: AgentParams,
        response: { 200: BudgetAnswer, 404: ErrorBody },
      },
    },
    async (req) => {
      requireAgentAccess(req, req.params.agent);
      const b = await engine.agents.budget(req.params.agent);
      return {
        agent: req.params.agent,
        time_zone: b.time_zone,
        spent: b.limits.some((l) => l.spent >= l.limit),
        limits: b.limits.map((l) => ({
          metric: l.metric,
          window: l.window,
          limit: l.limit,
          spent: l.spent,
          remaining: l.remaining,
          spent_ratio: l.spent / l.limit,
          window_start: iso(l.window_start)!,
          resets_at: iso(l.resets_at)!,
        })),
      };
    },
  );

  app.delete(
    '/v1/agents/:agent',
    {
      schema: {
        tags: ['agents'],
        summary: 'Delete an agent: cancels its queued work, asks running work to stop; history stays',
        params: AgentParams,
        body: NoBody,
        response: { 200: z.object({ deleted: z.string(), cancelled: z.number(), cancel_requested: z.number() }), 404: ErrorBody },
      },
    },
    async (req) => {
      const out = await engine.agents.delete(req.params.agent, actorOf(req));
      return { deleted: req.params.agent, ...out };
    },
  );
}
