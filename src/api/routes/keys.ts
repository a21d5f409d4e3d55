import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { iso } from '../../engine/views.ts';
import type { ApiKeyRow } from '../../store/schema.ts';
import { actorOf } from '../auth.ts';
import { ApiKey, ApiKeyCreated, ErrorBody, KeyCreate, KeyParams, NoBody } from '../schemas.ts';
import type { ApiDeps } from '../deps.ts';

const keyView = (k: ApiKeyRow) => ({
  id: k.id,
  name: k.name,
  scope: k.scope,
  agent: k.agent,
  created_at: iso(k.created_at)!,
  revoked_at: iso(k.revoked_at),
});

export const keyRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, { keys }) => {
  app.post(
    '/v1/keys',
    {
      schema: {
        tags: ['keys'],
        summary: 'Create an API key (admin, or agent-scoped for workers). The secret is shown once',
        body: KeyCreate,
        response: { 201: ApiKeyCreated, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (req, reply) => {
      const { row, key } = await keys.create(req.body, actorOf(req));
      return reply.code(201).send({ ...keyView(row), key });
    },
  );

  app.get(
    '/v1/keys',
    {
      schema: {
        tags: ['keys'],
        summary: 'List API keys (never their secrets)',
        response: { 200: z.object({ keys: z.array(ApiKey) }) },
      },
    },
    async () => {
      return { keys: (await keys.list()).map(keyView) };
    },
  );

  app.delete(
    '/v1/keys/:id',
    {
      schema: {
        tags: ['keys'],
        summary: 'Revoke an API key (409 last_admin_key: the last active admin key stays)',
        params: KeyParams,
        body: NoBody,
        response: { 200: ApiKey, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (req) => {
      return keyView(await keys.revoke(req.params.id, actorOf(req)));
    },
  );
};
