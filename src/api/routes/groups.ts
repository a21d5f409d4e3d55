import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { GROUP_LIMITS, GROUP_PAGE } from '../../domain/groups.ts';
import type { GroupCreatedView } from '../../engine/composition/group-service.ts';
import { fingerprint, readIdempotencyKey } from '../../engine/triggers/idempotency.ts';
import { actorOf } from '../auth.ts';
import { decodeTimeCursor, encodeTimeCursor } from '../cursors.ts';
import type { ApiDeps } from '../deps.ts';
import { bodyText, payloadText } from '../payload.ts';
import { idempotent } from '../idempotent.ts';
import { ErrorBody, NoBody } from '../schemas.ts';
import { Group, GroupCancelled, GroupCreate, GroupCreated, GroupListQuery, GroupPage, GroupParams } from '../schemas/composition.ts';

/**
 * Groups (fan-out with a join). Creating a group submits to every member agent, and
 * submitting takes an admin key (agent-scoped keys run only the worker protocol): so do these.
 */
export const groupRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, { engine, idempotency }) => {
  const { groups } = engine;

  app.post(
    '/v1/groups',
    {
      bodyLimit: GROUP_LIMITS.bodyLimitBytes,
      // Payloads are stored, never read here: in a large group, checked and serialised off the event loop.
      config: { rawJsonPaths: ['members.*.payload'] },
      schema: {
        tags: ['groups'],
        summary:
          'Create a group: every member task and the group in one transaction, or nothing (409 group_refused lists each failing item)',
        body: GroupCreate,
        response: { 201: GroupCreated, 400: ErrorBody, 409: ErrorBody, 413: ErrorBody, 422: ErrorBody },
      },
    },
    async (req, reply) => {
      const body = req.body;
      const members = body.members.map(({ payload, ...m }, i) => ({
        ...m,
        payloadJson: payloadText(payload, `body.members[${i}].payload`),
      }));
      // Idempotency-Key (scope: groups): the first answer is stored with the group and replayed.
      const key = readIdempotencyKey(req.headers['idempotency-key']);
      const idem = key ? { scope: 'groups', key, hash: fingerprint('group', bodyText(body, ['members.*.payload'])) } : undefined;
      const answerFor = (created: GroupCreatedView) => ({ status: 201, body: created });
      return idempotent<GroupCreatedView>(
        { engine, idempotency },
        reply,
        idem,
        answerFor,
        async (onCreated) => {
          const created = await groups.create(
            {
              members,
              policy: body.policy,
              quorum: body.quorum,
              join: body.join,
              origin: { key_id: req.principal.keyId },
              idempotency_key: key ?? null,
            },
            actorOf(req),
            { onCreated, idempotencyTtlMs: idempotency?.ttlMs },
          );
          return answerFor(created);
        },
        () => null, // the stored key names a group, not one execution
      );
    },
  );

  app.get(
    '/v1/groups',
    {
      schema: {
        tags: ['groups'],
        summary: `List groups, newest first, without their members (at most ${GROUP_PAGE.max} a page)`,
        querystring: GroupListQuery,
        response: { 200: GroupPage, 400: ErrorBody },
      },
    },
    async (req) => {
      const limit = req.query.limit ?? GROUP_PAGE.default;
      const rows = await groups.list({ limit, before: req.query.cursor ? decodeTimeCursor(req.query.cursor) : undefined });
      return {
        groups: rows.map(({ cursor: _c, ...g }) => g),
        next_cursor: rows.length === limit ? encodeTimeCursor(rows[rows.length - 1]!.cursor) : null,
      };
    },
  );

  app.get(
    '/v1/groups/:id',
    {
      schema: {
        tags: ['groups'],
        summary: 'Read a group: status, progress, each member (the latest run of its retry chain) and the join',
        params: GroupParams,
        response: { 200: Group, 404: ErrorBody },
      },
    },
    async (req) => {
      return groups.get(req.params.id);
    },
  );

  app.post(
    '/v1/groups/:id/cancel',
    {
      schema: {
        tags: ['groups'],
        summary: 'Cancel a group: a running group becomes cancelled (no join); members not ended and the join are cancelled',
        params: GroupParams,
        body: NoBody,
        response: { 200: GroupCancelled, 404: ErrorBody },
      },
    },
    async (req) => {
      const { changed } = await groups.cancel(req.params.id, actorOf(req));
      return { changed, group: await groups.get(req.params.id) };
    },
  );
};
