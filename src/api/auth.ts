import type { FastifyReply, FastifyRequest } from 'fastify';
import { Forbidden } from '../domain/errors.ts';
import type { KeyStore, Principal } from '../auth/keys.ts';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal;
  }
}

/** preHandler for every /v1 route: `Authorization: Bearer <key>`. */
export function authenticate(keys: KeyStore) {
  return async (req: FastifyRequest, _reply: FastifyReply) => {
    const header = req.headers.authorization;
    const token = header?.startsWith('Bearer ') ? header.slice(7).trim() : undefined;
    req.principal = await keys.verify(token);
  };
}

export function requireAdmin(req: FastifyRequest): void {
  if (req.principal.scope !== 'admin') throw new Forbidden('this operation needs an admin key; agent-scoped keys may only run the worker protocol for their agent');
}

/** Agent-scoped keys act only for their own agent. */
export function requireAgentAccess(req: FastifyRequest, agent: string): void {
  if (req.principal.scope === 'agent' && req.principal.agent !== agent) {
    throw new Forbidden(`this key is scoped to agent '${req.principal.agent}', not '${agent}'`);
  }
}

/** Who did it, for events and the audit log. */
export const actorOf = (req: FastifyRequest) => `key:${req.principal.keyId}`;
