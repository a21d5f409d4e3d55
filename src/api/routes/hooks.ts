import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { DEFAULTS, type IdempotencySettings } from '../../config.ts';
import { BatonError } from '../../domain/errors.ts';
import { infiniteMessage, jsonShape, tooDeepMessage } from '../../domain/json.ts';
import type { Engine } from '../../engine/engine.ts';
import { fingerprint, readIdempotencyKey } from '../../engine/triggers/idempotency.ts';
import {
  hashToken,
  RefusalLog,
  signatureValid,
  STANDARD_TOLERANCE_S,
  standardSignatureValid,
  WEBHOOK_BODY_LIMIT,
  type StandardHeaders,
} from '../../engine/triggers/webhooks.ts';
import type { WebhookRow } from '../../store/schema.ts';
import { UNAVAILABLE_RETRY_AFTER_S } from '../../store/unavailable.ts';
import { countWebhook } from '../../metrics.ts';
import { idempotent } from '../idempotent.ts';
import { ErrorBody } from '../schemas.ts';
import { HookAccepted } from '../schemas/triggers.ts';
import { z } from 'zod';
import { RateLimiter } from '../rate-limit.ts';

export interface HookOptions {
  engine: Engine;
  /** Largest body accepted (default 64 KiB). */
  bodyLimit?: number;
  /** Deliveries per second per source address (burst twice that). Default 50; `baton up`: BATON_HOOK_RATE_PER_ADDRESS. */
  perAddressRate?: number;
  /** Deliveries per second per webhook (burst twice that). Default 50; `baton up`: BATON_HOOK_RATE_PER_WEBHOOK. */
  perWebhookRate?: number;
  /** Idempotency-Key lifetime and in-flight wait (defaults: IDEMPOTENCY). */
  idempotency?: Partial<IdempotencySettings>;
}

const HookParams = z.object({ token: z.string().describe('the webhook URL token (bwh_…)') });

const NOT_FOUND = { error: 'not_found', message: 'no such webhook' };
/** Refusal counts of minutes that are over are written at least this often. */
const REFUSAL_FLUSH_MS = 15_000;

const header = (req: FastifyRequest, name: string): string | undefined => {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
};

/** baton_webhook_requests_total{outcome} of an answer whose handler set none: by its status. */
const FALLBACK: Record<number, string> = {
  400: 'invalid_json',
  401: 'bad_signature',
  404: 'not_found',
  409: 'idempotency_in_flight',
  413: 'too_large',
  422: 'idempotency_key_reused',
  429: 'refused',
  503: 'unavailable',
};

interface SignatureCheck {
  secret: string;
  raw: Buffer;
  standard: StandardHeaders;
  /** X-Baton-Signature, or X-Hub-Signature-256. */
  given: string | undefined;
  now: number;
  webhookId: string;
  ip: string;
  refusals: RefusalLog;
}

/** Refuse a delivery whose signature does not match (invalid_signature), noting the refusal. */
function checkSignature(c: SignatureCheck): void {
  if (c.standard.signature !== undefined) {
    // Standard Webhooks: signed id and timestamp, so a captured delivery expires.
    const check = standardSignatureValid(c.secret, c.raw, c.standard, c.now);
    if (check !== 'ok') {
      c.refusals.note(c.webhookId, check === 'stale_timestamp' ? 'stale_timestamp' : 'invalid_signature', c.ip);
      throw new BatonError(
        'invalid_signature',
        check === 'stale_timestamp'
          ? `header webhook-timestamp: more than ${STANDARD_TOLERANCE_S} s from the server's clock (a replayed or delayed delivery)`
          : 'header webhook-signature: no v1 signature matches HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>" with the webhook secret',
      );
    }
  } else {
    if (!signatureValid(c.secret, c.raw, c.given)) {
      c.refusals.note(c.webhookId, 'invalid_signature', c.ip);
      throw new BatonError(
        'invalid_signature',
        'header X-Baton-Signature (or X-Hub-Signature-256, or the Standard Webhooks headers): missing or not sha256=<HMAC-SHA256 of the raw body with the webhook secret>',
      );
    }
  }
}

/** The delivery's body as JSON (null when empty), or a refusal (invalid_json, validation_error), noted. */
function parseBody(raw: Buffer, webhookId: string, ip: string, refusals: RefusalLog): unknown {
  if (raw.length === 0) return null;
  const text = raw.toString('utf8');
  const shape = jsonShape(text);
  if (shape.tooDeep || shape.infinite) {
    // A refusal, not an outage: a 503 here would have the sender retry it forever.
    refusals.note(webhookId, 'invalid_json', ip);
    throw new BatonError('validation_error', shape.tooDeep ? tooDeepMessage('body') : infiniteMessage('body'));
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    refusals.note(webhookId, 'invalid_json', ip);
    throw new BatonError('invalid_json', `body: not JSON (${(err as Error).message})`);
  }
}

/**
 * The delivery's idempotency key and the header it came from. The sender's delivery id is the key
 * when there is no explicit one, so a provider's "redeliver" (same id, same body) returns the first
 * answer instead of a second run. Once a signature was verified with that id, the id wins over an
 * `Idempotency-Key` header: that header is not signed, so a replay inside the tolerance window
 * could otherwise pick a fresh one and start a new run each time.
 */
function deliveryKey(
  req: FastifyRequest,
  standard: StandardHeaders,
  verified: 'standard' | 'github' | null,
): [string, string | string[] | undefined] {
  const github = header(req, 'x-github-delivery');
  if (verified === 'standard' && standard.id !== undefined) return ['webhook-id', standard.id];
  if (verified === 'github' && github !== undefined) return ['X-GitHub-Delivery', github];
  if (req.headers['idempotency-key'] !== undefined) return ['Idempotency-Key', req.headers['idempotency-key']];
  return standard.id !== undefined ? ['webhook-id', standard.id] : ['X-GitHub-Delivery', github];
}

/**
 * POST /hooks/<token>, outside /v1 and its API keys: the token is the credential. Checks run in
 * this order, each answering before the next costs anything: rate limit (source address, then
 * webhook) → token (unknown or disabled: a neutral 404) → body size (413) → signature (401) →
 * JSON (400) → idempotency → trigger. The body is kept raw (a Buffer) for the HMAC.
 */
export const hookRoutes: FastifyPluginAsync<HookOptions> = async (app, opts) => {
  const { engine } = opts;
  const { webhooks } = engine;
  const bodyLimit = opts.bodyLimit ?? WEBHOOK_BODY_LIMIT;
  const addressRate = opts.perAddressRate ?? DEFAULTS.hookRatePerSecond;
  const webhookRate = opts.perWebhookRate ?? DEFAULTS.hookRatePerSecond;
  const byAddress = new RateLimiter(addressRate, addressRate * 2);
  const byWebhook = new RateLimiter(webhookRate, webhookRate * 2);
  const resolved = new WeakMap<FastifyRequest, WebhookRow>();
  const refusals = new RefusalLog(engine);
  const flushRefusals = () => {
    refusals.flush().catch((err) => app.log.warn({ err }, 'webhook refusal counts not written yet; retrying'));
  };
  const flushTimer = setInterval(flushRefusals, REFUSAL_FLUSH_MS);
  flushTimer.unref();
  app.addHook('onClose', async () => {
    clearInterval(flushTimer);
    await refusals.flush(true).catch(() => undefined);
  });

  // baton_webhook_requests_total{outcome}: a short fixed code per answer.
  const outcomes = new WeakMap<FastifyRequest, string>();
  app.addHook('onResponse', async (req, reply) => {
    if (reply.getHeader('idempotent-replay')) return countWebhook('replay');
    countWebhook(outcomes.get(req) ?? FALLBACK[reply.statusCode] ?? `http_${reply.statusCode}`);
  });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit }, (_req, body, done) => done(null, body));

  app.post<{ Params: { token: string } }>(
    '/hooks/:token',
    {
      bodyLimit,
      schema: {
        tags: ['webhooks'],
        summary: 'Deliver a webhook: 202 {status, execution_id}; see docs/triggers.md for every answer',
        description:
          'Public: the token in the path is the credential (no API key). Signed webhooks need X-Baton-Signature, X-Hub-Signature-256 or the Standard Webhooks headers.',
        security: [],
        params: HookParams,
        response: {
          202: HookAccepted,
          400: ErrorBody.describe('invalid_json | validation_error: the body is not JSON, or nested too deep; or a header is malformed'),
          401: ErrorBody.describe('invalid_signature: missing or wrong signature, or a Standard Webhooks timestamp outside the tolerance'),
          404: ErrorBody.describe('not_found: no enabled webhook has this token'),
          409: ErrorBody.describe('idempotency_in_flight: a delivery with this key is being handled'),
          413: ErrorBody.describe('payload_too_large'),
          422: ErrorBody.describe('idempotency_key_reused: the key came with a different body'),
          429: ErrorBody.describe('rate_limited | backlog_full'),
          503: ErrorBody.describe('unavailable: nothing was recorded; retry'),
        },
      },
      onRequest: async (req, reply) => {
        const token = req.params.token;
        if (!byAddress.take(`a:${req.ip}`) || !byWebhook.take(`w:${hashToken(token)}`)) {
          reply.header('retry-after', '1');
          outcomes.set(req, 'rate_limited');
          throw new BatonError('rate_limited', 'too many webhook deliveries; slow down');
        }
        const w = await webhooks.resolve(token);
        if (!w) return reply.code(404).send(NOT_FOUND);
        resolved.set(req, w);
      },
    },
    async (req, reply) => {
      const w = resolved.get(req)!;
      const token = req.params.token;
      const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      const secret = webhooks.secretOf(w, token);
      const standard: StandardHeaders = {
        id: header(req, 'webhook-id'),
        timestamp: header(req, 'webhook-timestamp'),
        signature: header(req, 'webhook-signature'),
      };
      const baton = header(req, 'x-baton-signature');
      const github = header(req, 'x-hub-signature-256');
      if (secret) {
        checkSignature({ secret, raw, standard, given: baton ?? github, now: engine.now(), webhookId: w.id, ip: req.ip, refusals });
      }
      const body = parseBody(raw, w.id, req.ip, refusals);
      // Which signature was verified, if any: the Standard Webhooks one signs its id.
      const verified = !secret
        ? null
        : standard.signature !== undefined
          ? 'standard'
          : baton === undefined && github !== undefined
            ? 'github'
            : null;
      const [keyHeader, keyValue] = deliveryKey(req, standard, verified);
      const key = readIdempotencyKey(keyValue, keyHeader);
      // Whether the target agent is paused, read before the delivery so a replayed answer says the same.
      const agentPaused = (await engine.agents.pauseState(w.agent)) !== null;
      const answer = (status: string, id: string) => ({ status: 202, body: { status, execution_id: id, agent_paused: agentPaused } });
      try {
        return await idempotent(
          opts,
          reply,
          key ? { scope: `webhook:${w.id}`, key, hash: fingerprint('hook', raw) } : undefined,
          (row) => answer(row.status, row.id),
          async (onCreated) => {
            const out = await webhooks.deliver({ webhook: w, token, body, sourceAddress: req.ip, idempotencyKey: key ?? null, onCreated });
            outcomes.set(req, out.status === 'already_running' ? 'already_running' : 'accepted');
            // Coalesced into the run in flight: an answer like any other, so the key is completed.
            return answer(out.status, out.execution_id);
          },
        );
      } catch (err) {
        if (err instanceof BatonError) throw err;
        // A genuine internal failure: nothing was created (the transaction rolled back) and the key
        // was released, so the sender's retry can succeed.
        // A full disk is logged once per interval by whoever listens to store:full.
        if (!engine.space.failed(err)) req.log.error({ err, webhook: w.id }, 'webhook delivery failed');
        reply.header('retry-after', String(UNAVAILABLE_RETRY_AFTER_S));
        return reply.code(503).send({ error: 'unavailable', message: 'the delivery could not be recorded; retry it' });
      }
    },
  );
};
