import type { FastifyReply, FastifyRequest } from 'fastify';
import { Forbidden, NotFound } from '../domain/errors.ts';
import type { Engine } from '../engine/engine.ts';
import type { KeyStore, Principal } from '../auth/keys.ts';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal;
  }
  interface FastifyContextConfig {
    /**
     * Agent-scoped keys may call this route (the worker protocol and reads of their own agent); the
     * handler then limits them to their agent. Every other /v1 route is for admin keys only.
     */
    agentKeys?: boolean;
  }
}

/**
 * Server-Sent Event routes, where `?key=` may stand in for the header: a browser's EventSource
 * cannot set headers. Nowhere else, so keys do not end up in ordinary URLs and access logs.
 */
const QUERY_KEY_ROUTES: Record<string, (query: Record<string, unknown>) => boolean> = {
  '/v1/events': () => true,
  '/v1/executions/:id/logs': (q) => q.follow === 'true' || q.follow === '1',
};
function allowsQueryKey(req: FastifyRequest, query: Record<string, unknown>): boolean {
  return req.method === 'GET' && !!QUERY_KEY_ROUTES[req.routeOptions.url ?? '']?.(query);
}

/**
 * onRequest for every /v1 route: `Authorization: Bearer <key>` (or `?key=` on SSE routes). An
 * agent-scoped key is refused here, before its body is read or checked, on every route not marked
 * `agentKeys`: a route is admin-only unless it says otherwise, and such a key learns nothing of a
 * route's body rules.
 */
export function authenticate(keys: KeyStore) {
  const admit = (req: FastifyRequest, principal: Principal, done: (err?: Error) => void) => {
    req.principal = principal;
    if (principal.scope !== 'admin' && !req.is404 && req.routeOptions.config.agentKeys !== true)
      return done(new Forbidden('this operation needs an admin key; agent-scoped keys may only run the worker protocol for their agent'));
    done();
  };
  // A callback rather than a promise: a key verified moments ago (KeyStore's cache, which a
  // revocation empties at once) passes without a promise or a microtask turn.
  return (req: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void) => {
    const header = req.headers.authorization;
    let token = header?.startsWith('Bearer ') ? header.slice(7).trim() : undefined;
    const query = req.query as Record<string, unknown> | undefined;
    if (query && 'key' in query && allowsQueryKey(req, query)) {
      if (token === undefined && typeof query.key === 'string') token = query.key;
      delete query.key; // not part of the route's own query schema
    }
    const known = keys.cached(token);
    if (known) return admit(req, known, done);
    keys.verify(token).then(
      (principal) => admit(req, principal, done),
      (err: Error) => done(err),
    );
  };
}

/** Agent-scoped keys act only for their own agent. */
export function requireAgentAccess(req: FastifyRequest, agent: string): void {
  if (req.principal.scope === 'agent' && req.principal.agent !== agent) {
    throw new Forbidden(`this key is scoped to agent '${req.principal.agent}', not '${agent}'`);
  }
}

/** Who did it, for events and the audit log. */
export const actorOf = (req: FastifyRequest) => `key:${req.principal.keyId}`;

/**
 * Agent-scoped keys may touch only their agent's executions; others look nonexistent to them.
 * Admin keys pass without a read (the operation itself says 404 for an unknown id).
 */
export async function requireExecutionAccess(engine: Engine, req: FastifyRequest, id: string): Promise<void> {
  if (req.principal.scope !== 'agent') return;
  const row = await engine.executionHead(id);
  if (!row || row.agent !== req.principal.agent) throw new NotFound('execution', id);
}
