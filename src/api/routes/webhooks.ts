import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { CONFIG_PAGE } from '../../domain/lists.ts';
import { webhookListView, webhookView } from '../../engine/triggers/views.ts';
import { actorOf } from '../auth.ts';
import { ErrorBody, NoBody } from '../schemas.ts';
import {
  Webhook,
  WebhookCreate,
  WebhookCreated,
  WebhookList,
  WebhookListQuery,
  WebhookParams,
  WebhookRotate,
} from '../schemas/triggers.ts';
import { decodeNameCursor, encodeNameCursor } from '../cursors.ts';
import type { ApiDeps } from '../deps.ts';
import type { WebhookRow } from '../../store/schema.ts';

/** Managing webhooks (admin). Deliveries arrive on /hooks/<token>: see hooks.ts. */
export const webhookRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, { engine }) => {
  const { webhooks } = engine;
  const views = async (rows: WebhookRow[]) => {
    const policies = await webhooks.effectivePolicies(rows);
    return rows.map((w) => webhookView(w, policies.get(w.id)));
  };

  app.post(
    '/v1/webhooks',
    {
      schema: {
        tags: ['webhooks'],
        summary: 'Create a webhook for a schedule or an agent; the token (and a generated secret) are shown once',
        body: WebhookCreate,
        response: { 201: WebhookCreated, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (req, reply) => {
      const { row, token, secret } = await webhooks.create(req.body, actorOf(req));
      const [view] = await views([row]);
      return reply.code(201).send({ ...view!, token, path: `/hooks/${token}`, secret });
    },
  );

  app.get(
    '/v1/webhooks',
    {
      schema: {
        tags: ['webhooks'],
        summary: 'List webhooks, a page at a time by agent and name (message as a preview; tokens and secrets are never shown again)',
        querystring: WebhookListQuery,
        response: { 200: WebhookList, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (req) => {
      const { agent, limit = CONFIG_PAGE.default, cursor } = req.query;
      const after = cursor ? decodeNameCursor(cursor, 3) : undefined;
      const rows = await webhooks.list(agent, { limit, after: after && { agent: after[0]!, name: after[1]!, id: after[2]! } });
      const policies = await webhooks.effectivePolicies(rows);
      const last = rows[rows.length - 1];
      return {
        webhooks: rows.map((w) => webhookListView(w, policies.get(w.id))),
        next_cursor: rows.length === limit && last ? encodeNameCursor([last.agent, last.name, last.id]) : null,
      };
    },
  );

  app.get(
    '/v1/webhooks/:id',
    {
      schema: {
        tags: ['webhooks'],
        summary: 'One webhook, its message whole (never its token or secret)',
        params: WebhookParams,
        response: { 200: Webhook, 404: ErrorBody },
      },
    },
    async (req) => {
      const [view] = await views([await webhooks.get(req.params.id)]);
      return view!;
    },
  );

  app.post(
    '/v1/webhooks/:id/rotate',
    {
      schema: {
        tags: ['webhooks'],
        summary: 'New token (the old one stops at once); a signed webhook gets a new secret too',
        params: WebhookParams,
        body: WebhookRotate,
        response: { 200: WebhookCreated, 404: ErrorBody },
      },
    },
    async (req) => {
      const { row, token, secret } = await webhooks.rotate(req.params.id, req.body?.secret, actorOf(req));
      const [view] = await views([row]);
      return { ...view!, token, path: `/hooks/${token}`, secret };
    },
  );

  app.delete(
    '/v1/webhooks/:id',
    {
      schema: {
        tags: ['webhooks'],
        summary: 'Delete a webhook (its token stops at once)',
        params: WebhookParams,
        body: NoBody,
        response: { 200: z.object({ deleted: z.string() }), 404: ErrorBody },
      },
    },
    async (req) => {
      await webhooks.delete(req.params.id, actorOf(req));
      return { deleted: req.params.id };
    },
  );
};
