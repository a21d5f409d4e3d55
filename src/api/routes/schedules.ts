import type { FastifyReply } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { DEFAULTS } from '../../config.ts';
import { fingerprint, readIdempotencyKey } from '../../engine/triggers/idempotency.ts';
import { CONFIG_PAGE } from '../../domain/lists.ts';
import { scheduleListView, scheduleView } from '../../engine/triggers/views.ts';
import type { ExecutionRow, ScheduleRow } from '../../store/schema.ts';
import { actorOf } from '../auth.ts';
import { idempotent } from '../idempotent.ts';
import { AgentParams, ErrorBody, NoBody } from '../schemas.ts';
import {
  Schedule,
  ScheduleCreate,
  ScheduleDeleted,
  ScheduleList,
  ScheduleListQuery,
  ScheduleParams,
  SchedulePatch,
  TriggerBody,
  Triggered,
} from '../schemas/triggers.ts';
import { decodeNameCursor, encodeNameCursor } from '../cursors.ts';
import type { ApiDeps, RouteApp } from '../deps.ts';
import { payloadText } from '../payload.ts';
import { answerWithExecution, withStoredPayload } from '../raw-json.ts';

/** A schedule as answered: its payload as stored (a long one never parsed here: up to 256 KiB). */
const scheduleAnswer = (reply: FastifyReply, row: ScheduleRow) =>
  withStoredPayload(reply, scheduleView({ ...row, payload: 'null' }), row.payload);

export const scheduleRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, deps) => {
  scheduleReadRoutes(app, deps);
  scheduleChangeRoutes(app, deps);
};

/** Create schedules, list them, read one. */
function scheduleReadRoutes(app: RouteApp, { engine }: ApiDeps): void {
  const { schedules } = engine;

  app.post(
    '/v1/agents/:agent/schedules',
    {
      bodyLimit: DEFAULTS.payloadLimitBytes + 128 * 1024,
      schema: {
        tags: ['schedules'],
        summary: 'Create a cron schedule for an agent',
        params: AgentParams,
        body: ScheduleCreate,
        response: { 201: Schedule, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (req, reply) => {
      payloadText(req.body.payload, 'body.payload');
      const row = await schedules.create(req.params.agent, req.body, actorOf(req));
      return reply.code(201).send(scheduleAnswer(reply, row));
    },
  );

  /** One page of schedules, by agent and name; the cursor is the last item's (agent, name). */
  async function page(agent: string | undefined, q: ScheduleListQuery) {
    const limit = q.limit ?? CONFIG_PAGE.default;
    const after = q.cursor ? decodeNameCursor(q.cursor, 2) : undefined;
    const rows = await schedules.list(agent, { limit, after: after && { agent: after[0]!, name: after[1]! } });
    const last = rows[rows.length - 1];
    return {
      schedules: rows.map(scheduleListView),
      next_cursor: rows.length === limit && last ? encodeNameCursor([last.agent, last.name]) : null,
    };
  }

  app.get(
    '/v1/agents/:agent/schedules',
    {
      schema: {
        tags: ['schedules'],
        summary: "An agent's schedules, a page at a time (message and payload as previews)",
        params: AgentParams,
        querystring: ScheduleListQuery,
        response: { 200: ScheduleList, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (req) => {
      return page(req.params.agent, req.query);
    },
  );

  app.get(
    '/v1/schedules',
    {
      schema: {
        tags: ['schedules'],
        summary: 'Every schedule, a page at a time (message and payload as previews)',
        querystring: ScheduleListQuery,
        response: { 200: ScheduleList, 400: ErrorBody },
      },
    },
    async (req) => {
      return page(undefined, req.query);
    },
  );

  app.get(
    '/v1/schedules/:id',
    {
      schema: {
        tags: ['schedules'],
        summary: 'One schedule with its next due times',
        params: ScheduleParams,
        response: { 200: Schedule, 404: ErrorBody },
      },
    },
    async (req, reply) => {
      return scheduleAnswer(reply, await schedules.get(req.params.id));
    },
  );
}

/** Change, delete and trigger a schedule. */
function scheduleChangeRoutes(app: RouteApp, { engine, idempotency }: ApiDeps): void {
  const { schedules } = engine;

  app.patch(
    '/v1/schedules/:id',
    {
      bodyLimit: DEFAULTS.payloadLimitBytes + 128 * 1024,
      schema: {
        tags: ['schedules'],
        summary: 'Change a schedule (a new cron, time zone or enabled flag recomputes next_run_at from now)',
        params: ScheduleParams,
        body: SchedulePatch,
        response: { 200: Schedule, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (req, reply) => {
      payloadText(req.body.payload, 'body.payload');
      return scheduleAnswer(reply, await schedules.update(req.params.id, req.body, actorOf(req)));
    },
  );

  app.delete(
    '/v1/schedules/:id',
    {
      schema: {
        tags: ['schedules'],
        summary: 'Delete a schedule: queued runs cancelled, running ones asked to stop; history stays',
        params: ScheduleParams,
        body: NoBody,
        response: { 200: ScheduleDeleted, 404: ErrorBody },
      },
    },
    async (req) => {
      const out = await schedules.delete(req.params.id, actorOf(req));
      return { deleted: req.params.id, ...out };
    },
  );

  app.post(
    '/v1/schedules/:id/trigger',
    {
      bodyLimit: DEFAULTS.payloadLimitBytes + 128 * 1024,
      schema: {
        tags: ['schedules'],
        summary:
          'Run a schedule now: 201 with the real execution id, or 409 already_running naming the run in flight, 429 backlog_full, 404',
        params: ScheduleParams,
        body: TriggerBody,
        response: { 201: Triggered, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody, 422: ErrorBody, 429: ErrorBody },
      },
    },
    async (req, reply) => {
      const key = readIdempotencyKey(req.headers['idempotency-key']);
      const payload = req.body?.payload;
      payloadText(payload, 'body.payload');
      // 404 comes first: an unknown schedule is not an idempotency question.
      const s = await schedules.get(req.params.id);
      const via = req.headers['x-baton-client'] === 'cli' ? 'cli' : 'manual';
      const paused = (await engine.agents.pauseState(s.agent)) !== null;
      const answerFor = (row: ExecutionRow) => ({
        status: 201,
        body: answerWithExecution(row, (execution) => ({
          execution_id: row.id,
          status: row.status,
          schedule_id: s.id,
          agent: row.agent,
          agent_paused: paused,
          execution,
        })),
      });
      return idempotent(
        { engine, idempotency },
        reply,
        key ? { scope: `agent:${s.agent}`, key, hash: fingerprint('trigger', s.id, JSON.stringify(req.body ?? null)) } : undefined,
        answerFor,
        async (onCreated) => {
          const row = await schedules.trigger(s.id, {
            actor: actorOf(req),
            trigger: 'manual',
            origin: { key_id: req.principal.keyId, via },
            payload,
            idempotencyKey: key ?? null,
            onCreated,
          });
          return answerFor(row);
        },
      );
    },
  );
}
