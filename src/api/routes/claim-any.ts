import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { DEFAULTS } from '../../config.ts';
import { Unauthorized } from '../../domain/errors.ts';
import { requireAgentAccess } from '../auth.ts';
import type { ApiDeps, RouteApp } from '../deps.ts';
import { RawAnswer } from '../raw-json.ts';
import { ParkedClaims, type Parked } from '../parked-claims.ts';
import { endClaimOnRevoke } from '../revocation.ts';
import { ErrorBody } from '../schemas.ts';
import { ClaimAnyBody, ClaimAnyResponse, ClaimWidenBody, ClaimWidened, ClaimWithdrawBody, ClaimWithdrawn } from '../schemas/claim-any.ts';

/**
 * One long-poll claim for several agents (POST /v1/claim), its widening (POST /v1/claim/widen)
 * and its withdrawal (POST /v1/claim/withdraw), by request. A worker serving many agents keeps one
 * claim out; when one of its agents gets a free slot that the claim does not ask for, it adds that
 * agent to the claim while it waits. Where the widening does not take (the claim is answering, or
 * waits in another process), it withdraws the claim and claims again with the new capacity. The
 * withdrawal ends the wait, and the claim answers as a wait that ran out does: with the tasks a
 * look already begun took. Its connection is never cut, so no task leased to it is left
 * unanswered (docs/delivery.md, "One claim for many agents").
 *
 * A withdrawal reaches only the caller's own claims, in whichever server process of the store
 * they wait (parked-claims.ts).
 */
export function claimAnyRoutes(app: RouteApp, deps: ApiDeps): void {
  const parked = new ParkedClaims(deps.engine);
  app.addHook('onClose', async () => parked.close());
  app.post(
    '/v1/claim',
    {
      config: { agentKeys: true },
      schema: {
        tags: ['worker protocol'],
        summary:
          'Claim tasks of any of several agents (long-poll), each within its `max`. 200 with tasks and their leases, or 204 when nothing came in time',
        body: ClaimAnyBody,
        response: { 200: ClaimAnyResponse, 204: z.null(), 400: ErrorBody, 401: ErrorBody, 403: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (req, reply) => {
      for (const { agent } of req.body.agents) requireAgentAccess(req, agent);
      const raw = new RawAnswer();
      const rows = await claimAny(deps, req, reply, req.body, parked);
      if (rows.length === 0) return reply.code(204).send(null);
      return raw.answer(reply, { tasks: rows.map((r) => raw.task(r)) });
    },
  );

  app.post(
    '/v1/claim/widen',
    {
      config: { agentKeys: true },
      schema: {
        tags: ['worker protocol'],
        summary:
          'Add agents to a waiting claim made with `claim_id`, each with its `max`: `widened` says whether it took (it may then answer with their tasks)',
        body: ClaimWidenBody,
        response: { 200: ClaimWidened, 400: ErrorBody, 401: ErrorBody, 403: ErrorBody },
      },
    },
    async (req) => {
      for (const { agent } of req.body.agents) requireAgentAccess(req, agent);
      const items = req.body.agents.map(({ agent, max }) => ({ agent, max: max ?? 1 }));
      return { widened: parked.widen(ParkedClaims.nameOf(req.principal.keyId, req.body.claim_id), items) };
    },
  );

  app.post(
    '/v1/claim/withdraw',
    {
      config: { agentKeys: true },
      schema: {
        tags: ['worker protocol'],
        summary: 'End the wait of a claim made with `claim_id`: it answers now, with whatever tasks it took (never cut: nothing is lost)',
        body: ClaimWithdrawBody,
        response: { 200: ClaimWithdrawn },
      },
    },
    async (req) => ({ withdrawn: parked.withdraw(ParkedClaims.nameOf(req.principal.keyId, req.body.claim_id)) }),
  );
}

async function claimAny(
  { engine, keys }: ApiDeps,
  req: FastifyRequest,
  reply: FastifyReply,
  body: z.output<typeof ClaimAnyBody>,
  parked: ParkedClaims,
) {
  const keyId = req.principal.keyId;
  const owner = body.worker_id ?? `key:${keyId}`;
  const items = body.agents.map(({ agent, max }) => ({ agent, max: max ?? 1 }));
  const waitMs = body.wait_seconds !== undefined ? body.wait_seconds * 1000 : DEFAULTS.claimWaitMs;
  if (waitMs <= 0) return engine.claimAny(items, { owner, waitMs: 0, keyId });
  // As a single claim (worker.ts claimFor): stop when the client goes away or the key is revoked.
  const abort = new AbortController();
  const revocation = endClaimOnRevoke(engine, keys, keyId, abort);
  const onClose = () => {
    if (!reply.raw.writableFinished) abort.abort();
  };
  reply.raw.once('close', onClose);
  const claim: Parked = { end: new AbortController(), widening: {} };
  const name = body.claim_id !== undefined ? ParkedClaims.nameOf(keyId, body.claim_id) : undefined;
  if (name !== undefined) parked.park(name, claim);
  try {
    const rows = await engine.claimAny(items, {
      owner,
      waitMs,
      signal: abort.signal,
      end: claim.end.signal,
      widening: claim.widening,
      keyId,
    });
    if (rows.length === 0 && revocation.revoked()) throw new Unauthorized('the API key that made this claim was revoked');
    return rows;
  } finally {
    if (name !== undefined) parked.leave(name, claim);
    revocation.off();
    reply.raw.off('close', onClose);
  }
}
