import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { DEFAULTS } from '../../config.ts';
import { executionView, iso } from '../../engine/views.ts';
import { actorOf, requireAgentAccess, requireExecutionAccess } from '../auth.ts';
import { AgentParams, ClaimBody, ClaimResponse, ErrorBody, Execution, ExecutionParams, HeartbeatResponse, LeaseBody } from '../schemas.ts';
import { CompleteAndClaimBody, Completed } from '../schemas/batch.ts';
import { BatonError, Unauthorized } from '../../domain/errors.ts';
import type { ApiDeps, RouteApp } from '../deps.ts';
import { RawAnswer } from '../raw-json.ts';
import { endClaimOnRevoke } from '../revocation.ts';

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

/** Complete an execution (and claim the next); release it back to the queue. */
function outcomeRoutes(app: RouteApp, deps: ApiDeps): void {
  const { engine } = deps;
  app.post(
    '/v1/executions/:id/complete',
    {
      bodyLimit: 4 * 1024 * 1024,
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
      await requireExecutionAccess(engine, req, req.params.id);
      const b = req.body;
      const error = b.error
        ? { code: b.error.code ?? (b.status === 'failed' ? 'failed' : b.status), message: b.error.message }
        : b.status === 'failed'
          ? { code: 'failed', message: 'the worker reported failure without a message' }
          : null;
      const row = await engine.complete(
        req.params.id,
        b.lease_token,
        { status: b.status, result: b.result, error, usage: b.usage },
        actorOf(req),
      );
      const raw = new RawAnswer();
      const answer = <E extends object>(extra: E) => raw.answer(reply, Object.assign(raw.execution(row), extra));
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
