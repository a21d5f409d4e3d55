import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { DEFAULTS } from '../../config.ts';
import { executionView, iso } from '../../engine/views.ts';
import { actorOf, requireAgentAccess, requireExecutionAccess } from '../auth.ts';
import { AgentParams, ClaimBody, ClaimResponse, ErrorBody, Execution, ExecutionParams, HeartbeatResponse, LeaseBody } from '../schemas.ts';
import { CompleteAndClaimBody, Completed, CompletionsAnswer, CompletionsBody, type CompletionAnswer } from '../schemas/batch.ts';
import { COMPLETION } from '../../domain/batch.ts';
import { RawJson } from '../../domain/json.ts';
import { itemAnswer } from '../errors.ts';
import { BatonError, Unauthorized } from '../../domain/errors.ts';
import type { ApiDeps, RouteApp } from '../deps.ts';
import { RawAnswer } from '../raw-json.ts';
import { endClaimOnRevoke } from '../revocation.ts';
import { claimAnyRoutes } from './claim-any.ts';

const workerId = (req: FastifyRequest, given?: string) => given ?? `key:${req.principal.keyId}`;

/** Claim for `agent` (a claim, or the claim after a completion), leased to the caller's worker id. */
async function claimFor(
  { engine, keys }: ApiDeps,
  req: FastifyRequest,
  reply: FastifyReply,
  agent: string,
  body: { worker_id?: string; max?: number; wait_seconds?: number },
  defaultWaitMs: number,
  raw: RawAnswer,
) {
  const owner = workerId(req, body.worker_id);
  const max = body.max ?? 1;
  const waitMs = body.wait_seconds !== undefined ? body.wait_seconds * 1000 : defaultWaitMs;
  // A claim that does not wait answers within this request's turn: nothing to stop.
  const keyId = req.principal.keyId;
  if (waitMs <= 0) return (await engine.claim(agent, { owner, max, waitMs: 0, keyId })).map((r) => raw.task(r));
  // Stop waiting when the client goes away, so no task is leased to a closed connection, or when
  // the caller's key is revoked, so none is leased to a key that no longer works.
  const abort = new AbortController();
  const revocation = endClaimOnRevoke(engine, keys, keyId, abort);
  const onClose = () => {
    if (!reply.raw.writableFinished) abort.abort();
  };
  reply.raw.once('close', onClose);
  try {
    const rows = await engine.claim(agent, { owner, max, waitMs, signal: abort.signal, keyId });
    if (rows.length === 0 && revocation.revoked()) throw new Unauthorized('the API key that made this claim was revoked');
    return rows.map((r) => raw.task(r));
  } finally {
    revocation.off();
    reply.raw.off('close', onClose);
  }
}

export const workerRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, deps) => {
  leaseRoutes(app, deps);
  claimAnyRoutes(app, deps);
  outcomeRoutes(app, deps);
};

/** Claim work for an agent; renew a lease (heartbeat). */
function leaseRoutes(app: RouteApp, deps: ApiDeps): void {
  const { engine } = deps;
  app.post(
    '/v1/agents/:agent/claim',
    {
      config: { agentKeys: true },
      schema: {
        tags: ['worker protocol'],
        summary: 'Claim tasks (long-poll). 200 with tasks and their leases, or 204 when nothing came in time',
        params: AgentParams,
        body: ClaimBody.nullish(), // a bare POST arrives as null
        response: { 200: ClaimResponse, 204: z.null(), 404: ErrorBody, 403: ErrorBody, 409: ErrorBody },
      },
    },
    async (req, reply) => {
      requireAgentAccess(req, req.params.agent);
      const raw = new RawAnswer();
      const tasks = await claimFor(deps, req, reply, req.params.agent, req.body ?? {}, DEFAULTS.claimWaitMs, raw);
      if (tasks.length === 0) return reply.code(204).send(null);
      return raw.answer(reply, { tasks });
    },
  );

  app.post(
    '/v1/executions/:id/heartbeat',
    {
      config: { agentKeys: true },
      schema: {
        tags: ['worker protocol'],
        summary: 'Renew the lease; says whether cancellation was requested. 409 lease_lost: stop the task',
        params: ExecutionParams,
        body: LeaseBody,
        response: { 200: HeartbeatResponse, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (req) => {
      await requireExecutionAccess(engine, req, req.params.id);
      const r = await engine.heartbeat(req.params.id, req.body.lease_token);
      return { lease_expires_at: iso(r.lease_expires_at)!, cancel_requested: r.cancel_requested, deadline_at: iso(r.deadline_at) };
    },
  );
}

/**
 * One completion, as the single route and each item of the batch take it: access checked, the
 * outcome landed (fenced by the lease token), and with `claim` the agent's next tasks claimed.
 * Returns the 200 answer; a refusal throws.
 */
async function completeOne(deps: ApiDeps, req: FastifyRequest, reply: FastifyReply, raw: RawAnswer, id: string, b: CompleteAndClaimBody) {
  const { engine } = deps;
  await requireExecutionAccess(engine, req, id);
  const error = b.error
    ? { code: b.error.code ?? (b.status === 'failed' ? 'failed' : b.status), message: b.error.message }
    : b.status === 'failed'
      ? { code: 'failed', message: 'the worker reported failure without a message' }
      : null;
  const row = await engine.complete(id, b.lease_token, { status: b.status, result: b.result, error, usage: b.usage }, actorOf(req));
  const answer = <E extends object>(extra: E) => Object.assign(raw.execution(row), extra);
  if (!b.claim) return answer({});
  // The completion has committed: whatever the claim meets, the answer is 200 with the
  // completion (a worker must not report a finished task twice), and a failed claim says why.
  try {
    const tasks = await claimFor(deps, req, reply, row.agent, b.claim, 0, raw);
    return answer({ tasks });
  } catch (err) {
    if (!(err instanceof BatonError)) req.log.warn({ err }, 'claim after completion failed');
    const claim_error =
      err instanceof BatonError
        ? { error: err.code, message: err.message }
        : { error: 'unavailable', message: 'the claim failed; claim again' };
    return answer({ tasks: [], claim_error });
  }
}

/** An item's result over the single route's bound (its size as the single route's body would count it). */
function resultTooLarge(result: unknown): boolean {
  if (result === undefined) return false;
  const text = result instanceof RawJson ? result.text : JSON.stringify(result);
  return Buffer.byteLength(text) > COMPLETION.bodyLimitBytes;
}

/** Complete an execution (and claim the next), or many at once; release it back to the queue. */
function outcomeRoutes(app: RouteApp, deps: ApiDeps): void {
  const { engine } = deps;
  app.post(
    '/v1/executions/:id/complete',
    {
      bodyLimit: COMPLETION.bodyLimitBytes,
      // A result is stored, never read here: in a large body, checked and serialised off the event loop.
      config: { agentKeys: true, rawJsonPaths: ['result'] },
      schema: {
        tags: ['worker protocol'],
        summary: 'Report the outcome (fenced by the lease token); with `claim`, the answer also carries the next tasks',
        params: ExecutionParams,
        body: CompleteAndClaimBody,
        response: { 200: Completed, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (req, reply) => {
      const raw = new RawAnswer();
      return raw.answer(reply, await completeOne(deps, req, reply, raw, req.params.id, req.body));
    },
  );

  app.post(
    '/v1/completions',
    {
      bodyLimit: COMPLETION.batchBodyLimitBytes,
      config: { agentKeys: true, rawJsonPaths: ['completions.*.result'] },
      schema: {
        tags: ['worker protocol'],
        summary: `Report up to ${COMPLETION.batchMaxItems} outcomes at once: each item as POST /v1/executions/{id}/complete takes and answers it, decided on its own`,
        body: CompletionsBody,
        response: { 200: CompletionsAnswer },
      },
    },
    async (req, reply) => {
      const raw = new RawAnswer();
      // A body within the single route's bound holds no item over it: only a larger one is measured.
      const measure = Number(req.headers['content-length'] ?? Infinity) > COMPLETION.bodyLimitBytes;
      // Concurrent, as completions from many requests would be: the store lands them together
      // (SQLite's group commit, PostgreSQL's gathered calls).
      const items = await Promise.all(
        req.body.completions.map(async ({ execution_id, ...body }, index): Promise<CompletionAnswer> => {
          try {
            if (measure && resultTooLarge(body.result)) {
              throw new BatonError(
                'payload_too_large',
                `body.completions.${index}.result: larger than ${COMPLETION.bodyLimitBytes.toLocaleString('en-US')} bytes, a completion's limit`,
              );
            }
            return { index, http_status: 200, completed: await completeOne(deps, req, reply, raw, execution_id, body) };
          } catch (err) {
            return { index, ...itemAnswer(err, req.log) };
          }
        }),
      );
      return raw.answer(reply, { items });
    },
  );

  app.post(
    '/v1/executions/:id/release',
    {
      config: { agentKeys: true },
      schema: {
        tags: ['worker protocol'],
        summary: 'Hand the task back to the queue without spending an attempt (graceful shutdown)',
        params: ExecutionParams,
        body: LeaseBody,
        response: { 200: Execution, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (req) => {
      await requireExecutionAccess(engine, req, req.params.id);
      return executionView(await engine.release(req.params.id, req.body.lease_token, actorOf(req)));
    },
  );
}
