import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { DEFAULTS } from '../../config.ts';
import { BatonError, NotFound } from '../../domain/errors.ts';
import { eventView, executionListView, executionView, type ExecutionView } from '../../engine/views.ts';
import { startedView } from '../../engine/composition/subscription-views.ts';
import { EXECUTION_PAGE } from '../../domain/lists.ts';
import { actorOf } from '../auth.ts';
import {
  AgentParams,
  Created,
  ErrorBody,
  Execution,
  ExecutionDetail,
  ExecutionPage,
  ExecutionParams,
  ExecutionStatusAnswer,
  ListExecutionsQuery,
  NoBody,
  SubmitBody,
} from '../schemas.ts';
import { decodeTimeCursor, encodeTimeCursor } from '../cursors.ts';
import type { ApiDeps, RouteApp } from '../deps.ts';
import { bodyText, payloadText } from '../payload.ts';
import { answerWithExecution, RawAnswer } from '../raw-json.ts';
import { fingerprint, readIdempotencyKey } from '../../engine/triggers/idempotency.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import { idempotent } from '../idempotent.ts';

export const executionRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, deps) => {
  submitRoute(app, deps);
  executionReadRoutes(app, deps);
  executionActionRoutes(app, deps);
};

/** A submit's key options; debounce and singleton need a key (400 naming the field). */
function keyOptions(body: SubmitBody) {
  for (const field of ['debounce_seconds', 'singleton'] as const) {
    if (body[field] !== undefined && body.key === undefined) throw new BatonError('validation_error', `body.${field}: needs body.key`);
  }
  if (body.key === undefined) return {};
  return { key: body.key, debounce_seconds: body.debounce_seconds ?? null, singleton: body.singleton ?? false };
}

/** Submit a task (POST /v1/agents/:agent/executions). */
function submitRoute(app: RouteApp, { engine, idempotency }: ApiDeps): void {
  app.post(
    '/v1/agents/:agent/executions',
    {
      bodyLimit: DEFAULTS.payloadLimitBytes + 128 * 1024,
      // The payload is stored, never read here: in a large body, checked and serialised off the event loop.
      config: { rawJsonPaths: ['payload'] },
      schema: {
        tags: ['executions'],
        summary: 'Submit a task: 201 with the real execution id, or a precise refusal',
        params: AgentParams,
        body: SubmitBody,
        response: { 201: Created, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody, 413: ErrorBody, 422: ErrorBody, 429: ErrorBody },
      },
    },
    async (req, reply) => {
      const body = req.body;
      const payloadJson = payloadText(body.payload, 'body.payload');
      if (body.run_after !== undefined && body.delay_seconds !== undefined) {
        throw new BatonError('validation_error', 'body.run_after, body.delay_seconds: give one or the other');
      }
      const runAfter =
        body.run_after !== undefined
          ? Date.parse(body.run_after)
          : body.delay_seconds !== undefined
            ? engine.now() + body.delay_seconds * 1000
            : null;
      const client = req.headers['x-baton-client'];
      const via = client === 'cli' || client === 'mcp' ? client : 'api';
      // Idempotency-Key (scope: the agent): the first answer is stored with the row and replayed.
      const key = readIdempotencyKey(req.headers['idempotency-key']);
      const idem = key
        ? { scope: `agent:${req.params.agent}`, key, hash: fingerprint('submit', req.params.agent, bodyText(body, ['payload'])) }
        : undefined;
      // As the submit found the agent (told before the answer is stored with an idempotency key).
      let paused = false;
      let debounced = false;
      // Two literals, not a spread amid one: V8's slow path on Node 20 (create.ts queuedValues).
      const created = (row: ExecutionRow, execution: ExecutionView) =>
        debounced
          ? { execution_id: row.id, status: row.status, agent: row.agent, agent_paused: paused, debounced, execution }
          : { execution_id: row.id, status: row.status, agent: row.agent, agent_paused: paused, execution };
      // The answer (stored with a key, and replayed as stored) carries the payload as it was stored: not parsed here.
      const answerFor = (row: ExecutionRow) => ({ status: 201, body: answerWithExecution(row, (execution) => created(row, execution)) });
      return idempotent({ engine, idempotency }, reply, idem, answerFor, async (onCreated) => {
        const row = await engine.submit(
          req.params.agent,
          {
            message: body.message,
            payloadJson,
            priority: body.priority,
            run_after: runAfter,
            trigger: via,
            origin: { key_id: req.principal.keyId },
            retry: body.retry,
            idempotency_key: key ?? null,
            ...keyOptions(body),
          },
          actorOf(req),
          onCreated,
          (agent) => {
            paused = agent.paused;
            debounced = agent.debounced ?? false;
          },
        );
        return answerFor(row);
      });
    },
  );
}

/** List executions, read one, read its status. */
function executionReadRoutes(app: RouteApp, { engine }: ApiDeps): void {
  app.get(
    '/v1/executions',
    {
      schema: {
        tags: ['executions'],
        summary: `List executions, newest first: list items carry previews of message, payload, result and error (at most ${EXECUTION_PAGE.max} a page)`,
        querystring: ListExecutionsQuery,
        response: { 200: ExecutionPage, 400: ErrorBody },
      },
    },
    async (req) => {
      const q = req.query;
      const limit = q.limit ?? EXECUTION_PAGE.default;
      const rows = await engine.listExecutions({
        agent: q.agent,
        status: q.status,
        schedule_id: q.schedule_id,
        created_after: q.since ? Date.parse(q.since) : undefined,
        created_before: q.until ? Date.parse(q.until) : undefined,
        limit,
        before: q.cursor ? decodeTimeCursor(q.cursor) : undefined,
      });
      return {
        executions: rows.map(executionListView),
        next_cursor: rows.length === limit ? encodeTimeCursor(rows[rows.length - 1]!) : null,
      };
    },
  );

  app.get(
    '/v1/executions/:id',
    {
      config: { largeAnswer: true },
      schema: {
        tags: ['executions'],
        summary: 'Read one execution with its event timeline, and why it is waiting when queued',
        params: ExecutionParams,
        response: { 200: ExecutionDetail, 404: ErrorBody },
      },
    },
    async (req, reply) => {
      const { execution, events, chain, waiting, started } = await engine.getExecution(req.params.id);
      // A long result goes out as stored (RawAnswer).
      const raw = new RawAnswer();
      const extra = { events: events.map(eventView), retry_chain: chain, waiting, started: started.map(startedView) };
      return raw.answer(reply, Object.assign(raw.execution(execution), extra));
    },
  );

  app.get(
    '/v1/executions/:id/status',
    {
      schema: {
        tags: ['executions'],
        summary: "Read one execution's status only: a light read to poll until it ends",
        params: ExecutionParams,
        response: { 200: ExecutionStatusAnswer, 404: ErrorBody },
      },
    },
    async (req) => {
      const head = await engine.executionHead(req.params.id);
      if (!head) throw new NotFound('execution', req.params.id);
      return { id: req.params.id, status: head.status };
    },
  );
}

/** Cancel an execution; retry a failed one. */
function executionActionRoutes(app: RouteApp, { engine }: ApiDeps): void {
  app.post(
    '/v1/executions/:id/cancel',
    {
      schema: {
        tags: ['executions'],
        summary: 'Cancel: queued ends at once; running is asked to stop (forced after the grace period)',
        params: ExecutionParams,
        body: NoBody,
        response: { 200: Execution, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (req) => {
      return executionView(await engine.cancel(req.params.id, actorOf(req)));
    },
  );

  app.post(
    '/v1/executions/:id/retry',
    {
      schema: {
        tags: ['executions'],
        summary:
          'Retry a failed execution: a new queued run with retry_of set (409 invalid_transition if not failed, 409 already_exists naming the retry if it has one)',
        params: ExecutionParams,
        body: NoBody,
        response: { 201: Execution, 404: ErrorBody, 409: ErrorBody, 429: ErrorBody },
      },
    },
    async (req, reply) => {
      return reply.code(201).send(executionView(await engine.retryFailed(req.params.id, actorOf(req))));
    },
  );
}
