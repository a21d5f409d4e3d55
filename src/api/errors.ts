import type { Duplex } from 'node:stream';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { BatonError, type ApiErrorCode, type EdgeErrorCode, type ErrorCode } from '../domain/errors.ts';
import { isStoreFull, isStoreUnavailable, UNAVAILABLE_RETRY_AFTER_S } from '../store/unavailable.ts';

/** The one mapping from domain errors to HTTP. */
const STATUS: Record<ErrorCode, number> = {
  not_found: 404,
  backlog_full: 429,
  lease_lost: 409,
  already_exists: 409,
  already_running: 409,
  invalid_transition: 409,
  wrong_delivery: 409,
  validation_error: 400,
  unauthorized: 401,
  forbidden: 403,
  payload_too_large: 413,
  unavailable: 503,
  idempotency_key_reused: 422,
  idempotency_in_flight: 409,
  rate_limited: 429,
  invalid_signature: 401,
  invalid_json: 400,
  // Some items of a group cannot be created now (details.items says which and why); nothing was written.
  group_refused: 409,
  too_many_streams: 429,
  last_admin_key: 409,
  pool_in_use: 409,
};

/**
 * Fastify's own 4xx errors (body parsing, content type, size) in our vocabulary; `message` says it
 * in ours where Fastify's would not name the limit or the field (else Fastify's message is kept).
 */
const FASTIFY_CODES: Record<string, { status: number; error: ApiErrorCode; message?: (req: FastifyRequest) => string }> = {
  FST_ERR_CTP_BODY_TOO_LARGE: {
    status: 413,
    error: 'payload_too_large',
    message: (req) => {
      const limit = req.routeOptions.bodyLimit;
      return `body: larger than ${limit === undefined ? 'the limit' : `${limit.toLocaleString('en-US')} bytes, this route's limit`}`;
    },
  },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: {
    status: 415,
    error: 'unsupported_media_type',
    message: (req) => {
      const given = req.headers['content-type']?.split(';')[0]?.trim();
      return `body: send application/json${given ? ` (Content-Type was ${JSON.stringify(given.slice(0, 100))})` : ''}`;
    },
  },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { status: 400, error: 'invalid_body' },
  FST_ERR_CTP_EMPTY_JSON_BODY: { status: 400, error: 'invalid_body' },
  FST_ERR_CTP_INVALID_JSON_BODY: { status: 400, error: 'invalid_json' },
};

/** The HTTP status a domain error code maps to. */
export const httpStatusOf = (code: ErrorCode): number => STATUS[code];

const errorBody = (err: BatonError) => ({ error: err.code, message: err.message, ...err.details });

const unavailableMessage = (err: unknown) =>
  isStoreFull(err)
    ? "the database's disk is full; nothing was changed; retry once space is freed"
    : 'the database is unavailable right now; nothing was changed; retry shortly';

/**
 * The answer a route would have given for `err`, as one item of a batch answers it (the batch
 * completion): a domain error or an unavailable database as errorHandler sends them; anything
 * else is an internal error, logged.
 */
export function itemAnswer(
  err: unknown,
  log: FastifyRequest['log'],
): { http_status: number; error: string; message: string; [k: string]: unknown } {
  if (err instanceof BatonError) return { http_status: STATUS[err.code], ...errorBody(err) };
  if (isStoreUnavailable(err)) return { http_status: 503, error: 'unavailable', message: unavailableMessage(err) };
  log.error({ err }, 'unhandled error in a batch item');
  return { http_status: 500, error: 'internal', message: 'internal error; see the server log' };
}

export function errorHandler(err: FastifyError, req: FastifyRequest, reply: FastifyReply) {
  if (err instanceof BatonError) {
    if (err.code === 'unavailable') reply.header('retry-after', String(UNAVAILABLE_RETRY_AFTER_S));
    return reply.code(STATUS[err.code]).send(errorBody(err));
  }
  if (req.raw.readableAborted) {
    // The client closed the connection before its body arrived (its socket's ECONNRESET is not
    // the database's): nobody reads this answer, and nothing was written.
    req.log.debug({ code: (err as { code?: string }).code }, 'client closed the request before its body arrived');
    return reply.code(400).send({ error: 'bad_request', message: 'the client closed the request before its body arrived' });
  }
  if (isStoreUnavailable(err)) {
    // Weather, not a fault: nothing was written (the transaction rolled back); try again shortly.
    req.log.warn({ code: (err as { code?: string }).code }, 'database unavailable');
    reply.header('retry-after', String(UNAVAILABLE_RETRY_AFTER_S));
    return reply.code(503).send({ error: 'unavailable', message: unavailableMessage(err) });
  }
  if (hasZodFastifySchemaValidationErrors(err)) {
    const where = err.validationContext ?? 'request';
    const message = err.validation
      .map((v) => {
        const path = v.instancePath.replace(/^\//, '').replaceAll('/', '.');
        const params = v.params as { issue?: { message?: string; keys?: string[] } };
        const keys = params.issue?.keys?.length ? ` (${params.issue.keys.join(', ')})` : '';
        return `${where}${path ? '.' + path : ''}: ${v.message}${keys}`;
      })
      .join('; ');
    return reply.code(400).send({ error: 'validation_error', message });
  }
  if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') {
    // The router's own refusal (a 414 that quoted the whole URL back): every id and name here is short.
    return reply.code(400).send({ error: 'validation_error', message: 'params: a path parameter is longer than 100 characters' });
  }
  const known = err.code ? FASTIFY_CODES[err.code] : undefined;
  if (known) return reply.code(known.status).send({ error: known.error, message: known.message?.(req) ?? err.message });
  if (err instanceof SyntaxError) return reply.code(400).send({ error: 'invalid_json', message: `body: ${err.message}` });
  if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
    return reply.code(err.statusCode).send({ error: 'bad_request', message: err.message });
  }
  req.log.error({ err }, 'unhandled error');
  return reply.code(500).send({ error: 'internal', message: 'internal error; see the server log' });
}

export function notFoundHandler(req: FastifyRequest, reply: FastifyReply) {
  return reply.code(404).send({ error: 'not_found', message: `no route ${req.method} ${req.url.split('?')[0]}` });
}

/**
 * What Node's HTTP parser refuses before any route sees it, answered in the API's vocabulary
 * (Fastify's default answers `{"error":"Bad Request","message":"Client Error","statusCode":400}`):
 * 408 `request_timeout` (headers or body too slow), 431 `headers_too_large`, 400 `bad_request`
 * (not HTTP: a malformed header, a bad Content-Length, both Content-Length and Transfer-Encoding).
 * The connection is closed after it, as Node does.
 */
export function clientErrorHandler(err: Error & { code?: string }, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, text, error, message]: [number, string, EdgeErrorCode, string] =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'Request Timeout', 'request_timeout', 'the request did not arrive in time']
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', 'headers_too_large', 'the request line and headers are larger than the server accepts']
        : [400, 'Bad Request', 'bad_request', 'not a well-formed HTTP request'];
  const body = JSON.stringify({ error, message });
  if (socket.writable)
    socket.write(
      `HTTP/1.1 ${status} ${text}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${body}`,
    );
  socket.destroy(err);
}
