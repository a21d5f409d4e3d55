import type { FastifyReply } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { DEFAULTS } from '../../config.ts';
import { subscriptionListView, subscriptionView } from '../../engine/composition/subscription-views.ts';
import { CONFIG_PAGE } from '../../domain/lists.ts';
import { actorOf } from '../auth.ts';
import { ErrorBody, NoBody } from '../schemas.ts';
import {
  Subscription,
  SubscriptionCreate,
  SubscriptionDeleted,
  SubscriptionList,
  SubscriptionParams,
  SubscriptionPatch,
  SubscriptionQuery,
} from '../schemas/composition.ts';
import { decodeTimeCursor, encodeTimeCursor } from '../cursors.ts';
import type { ApiDeps } from '../deps.ts';
import { payloadText } from '../payload.ts';
import { withStoredPayload } from '../raw-json.ts';
import type { SubscriptionRow } from '../../store/schema.ts';

/** A subscription as answered: its payload template as stored (a long one never parsed here). */
const subscriptionAnswer = (reply: FastifyReply, row: SubscriptionRow) =>
  withStoredPayload(reply, subscriptionView({ ...row, payload: null }), row.payload);

/** Subscriptions (chains): admin-scoped, like schedules. */
export const subscriptionRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, { engine }) => {
  const { subscriptions } = engine;

  app.post(
    '/v1/subscriptions',
    {
      bodyLimit: DEFAULTS.payloadLimitBytes + 128 * 1024,
      schema: {
        tags: ['subscriptions'],
        summary: "Subscribe an agent to another's outcomes: each matching final outcome starts one task on the target",
        body: SubscriptionCreate,
        response: { 201: Subscription, 400: ErrorBody, 404: ErrorBody, 413: ErrorBody },
      },
    },
    async (req, reply) => {
      payloadText(req.body.payload, 'body.payload');
      const row = await subscriptions.create(req.body, actorOf(req));
      return reply.code(201).send(subscriptionAnswer(reply, row));
    },
  );

  app.get(
    '/v1/subscriptions',
    {
      schema: {
        tags: ['subscriptions'],
        summary:
          'Subscriptions, oldest first, a page at a time (templates as previews): every one, or those of an agent (as source or target)',
        querystring: SubscriptionQuery,
        response: { 200: SubscriptionList, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (req) => {
      const { limit = CONFIG_PAGE.default, cursor, ...filter } = req.query;
      const rows = await subscriptions.list(filter, { limit, after: cursor ? decodeTimeCursor(cursor) : undefined });
      const last = rows[rows.length - 1];
      return { subscriptions: rows.map(subscriptionListView), next_cursor: rows.length === limit && last ? encodeTimeCursor(last) : null };
    },
  );

  app.get(
    '/v1/subscriptions/:id',
    {
      schema: {
        tags: ['subscriptions'],
        summary: 'One subscription',
        params: SubscriptionParams,
        response: { 200: Subscription, 404: ErrorBody },
      },
    },
    async (req, reply) => {
      return subscriptionAnswer(reply, await subscriptions.get(req.params.id));
    },
  );

  app.patch(
    '/v1/subscriptions/:id',
    {
      bodyLimit: DEFAULTS.payloadLimitBytes + 128 * 1024,
      schema: {
        tags: ['subscriptions'],
        summary: 'Change a subscription (its agents are fixed): later outcomes follow the new settings',
        params: SubscriptionParams,
        body: SubscriptionPatch,
        response: { 200: Subscription, 400: ErrorBody, 404: ErrorBody, 413: ErrorBody },
      },
    },
    async (req, reply) => {
      payloadText(req.body.payload, 'body.payload');
      return subscriptionAnswer(reply, await subscriptions.update(req.params.id, req.body, actorOf(req)));
    },
  );

  app.delete(
    '/v1/subscriptions/:id',
    {
      schema: {
        tags: ['subscriptions'],
        summary: 'Delete a subscription: tasks it started stay',
        params: SubscriptionParams,
        body: NoBody,
        response: { 200: SubscriptionDeleted, 404: ErrorBody },
      },
    },
    async (req) => {
      await subscriptions.delete(req.params.id, actorOf(req));
      return { deleted: req.params.id };
    },
  );
};
