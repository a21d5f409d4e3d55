import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { BATCH } from '../../domain/batch.ts';
import { BatonError } from '../../domain/errors.ts';
import { membersOf, RawJson } from '../../domain/json.ts';
import type { ExecutionStatus } from '../../domain/states.ts';
import type { SubmitManyItem } from '../../engine/engine.ts';
import { fingerprint, IDEMPOTENCY } from '../../engine/triggers/idempotency.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import { actorOf } from '../auth.ts';
import { AgentParams, ErrorBody } from '../schemas.ts';
import { SubmitBatchBody, SubmitBatchAnswer, type BatchItemAnswer } from '../schemas/batch.ts';
import type { ApiDeps } from '../deps.ts';
import { bodyText, payloadText } from '../payload.ts';
import { answerWithExecution } from '../raw-json.ts';

/**
 * POST /v1/agents/{agent}/executions/batch: many submits in one request and one transaction
 * (Engine.submitMany). A malformed item refuses the whole batch (400 naming the item and field,
 * nothing created); otherwise every item gets its own answer, so partial success is normal:
 * the items that fit the backlog are created, the rest are refused backlog_full.
 */
export const batchRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, { engine, idempotency }) => {
  app.post(
    '/v1/agents/:agent/executions/batch',
    {
      bodyLimit: BATCH.bodyLimitBytes,
      // Payloads are stored, never read here: in a large batch, checked and serialised off the event loop.
      config: { rawJsonPaths: ['items.*.payload'] },
      schema: {
        tags: ['executions'],
        summary: `Submit up to ${BATCH.maxItems} tasks at once: one transaction, an answer per item (created, replayed, or refused)`,
        params: AgentParams,
        body: SubmitBatchBody,
        response: { 200: SubmitBatchAnswer, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody, 413: ErrorBody },
      },
    },
    async (req) => {
      if (req.headers['idempotency-key'] !== undefined) {
        throw new BatonError('validation_error', 'header Idempotency-Key: a batch takes one key per item (body.items[].idempotency_key)');
      }
      const agent = req.params.agent;
      const client = req.headers['x-baton-client'];
      const via = client === 'cli' || client === 'mcp' ? client : 'api';
      const now = engine.now();
      const items: SubmitManyItem[] = req.body.items.map((item, i) => {
        const { idempotency_key, ...body } = item;
        const payloadJson = payloadText(body.payload, `body.items.${i}.payload`);
        if (body.run_after !== undefined && body.delay_seconds !== undefined) {
          throw new BatonError('validation_error', `body.items.${i}.run_after, body.items.${i}.delay_seconds: give one or the other`);
        }
        return {
          message: body.message,
          payloadJson,
          priority: body.priority,
          run_after:
            body.run_after !== undefined
              ? Date.parse(body.run_after)
              : body.delay_seconds !== undefined
                ? now + body.delay_seconds * 1000
                : null,
          trigger: via,
          origin: { key_id: req.principal.keyId },
          retry: body.retry,
          key: body.key ?? null,
          idempotency_key: idempotency_key ?? null,
          // The same fingerprint as a single submit of this body: a key works across the two routes.
          idem: idempotency_key ? { key: idempotency_key, hash: fingerprint('submit', agent, bodyText(body, ['payload'])) } : undefined,
        };
      });
      const paused = (await engine.agents.pauseState(agent)) !== null;
      // Stored with each keyed item: the answer a single submit would have given, so either route replays it.
      // Built around the stored payload, never parsing it (a thousand items' payloads would hold the event loop).
      const answerFor = (row: ExecutionRow) => ({
        status: 201,
        body: answerWithExecution(row, (execution) => ({
          execution_id: row.id,
          status: row.status,
          agent: row.agent,
          agent_paused: paused,
          execution,
        })),
      });
      const outcomes = await engine.submitMany(agent, items, actorOf(req), {
        ttlMs: idempotency?.ttlMs ?? IDEMPOTENCY.ttlMs,
        answerFor,
      });
      let created = 0;
      let replayed = 0;
      const answers: BatchItemAnswer[] = outcomes.map((o) => {
        if (o.kind === 'created') {
          created++;
          return { index: o.index, execution_id: o.id, status: o.status };
        }
        if (o.kind === 'refused') return { index: o.index, error: o.error.code, message: o.error.message };
        replayed++;
        // A stored answer is read for the members an item's answer repeats, not parsed whole.
        const text = o.answer.body instanceof RawJson ? o.answer.body.text : JSON.stringify(o.answer.body);
        const m = membersOf(text, ['execution_id', 'status', 'error', 'message']) as {
          execution_id?: string;
          status?: ExecutionStatus;
          error?: string;
          message?: string;
        };
        if (o.answer.status < 300 && m.execution_id) {
          return { index: o.index, execution_id: m.execution_id, status: m.status ?? 'queued', replayed: true };
        }
        return { index: o.index, error: m.error ?? 'internal', message: m.message ?? '', replayed: true };
      });
      return { agent, agent_paused: paused, created, replayed, refused: answers.length - created - replayed, items: answers };
    },
  );
};
