import type { SwaggerTransform } from '@fastify/swagger';
import type { FastifyInstance, RouteOptions } from 'fastify';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';
import { ErrorBody, NoBody, NoQuery } from './schemas.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The route answers 200 with a Server-Sent Events stream (a hijacked reply, which no response
     * schema describes): what the stream carries, for /openapi.json (openApiTransform).
     */
    sse?: string;
  }
}

/**
 * The statuses every route of a kind can answer, declared on the route so /openapi.json says
 * what the server does (test/api/api.fuzz.test.ts fails on an answer a route does not declare):
 * - any route: 400 (a malformed parameter, query or body), 503 (the database is away);
 * - a route under /v1: 401 (no, a bad or a revoked key), 403 (a key of the wrong scope), 404
 *   (what it names does not exist, or is not this key's to see);
 * - a route that takes a body (POST, PUT, PATCH, DELETE): 413 (too large), 415 (not JSON);
 * - any route reached through a trusted proxy: 429 too_many_connections (src/api/connections.ts).
 * A /v1 route that declares no query parameters gets NoQuery, so that one sent is a 400.
 * A route's own declarations (its 409s, 422s, 429s) stay as written. Routes outside /v1 that
 * are public (the webhook receiver) declare their own statuses and `security: []`.
 */
export function declareCommonAnswers(app: FastifyInstance): void {
  app.addHook('onRoute', (route: RouteOptions) => {
    const schema = (route.schema ?? {}) as Record<string, any>;
    if (schema.hide) return;
    const response: Record<string | number, unknown> = { ...(schema.response ?? {}) };
    const declare = (status: number, description: string) => {
      response[status] ??= ErrorBody.describe(description);
    };
    const methods = ([] as string[]).concat(route.method);
    const authenticated = route.url.startsWith('/v1/') || route.url === '/v1';
    declare(400, 'validation_error | invalid_json | invalid_body: the message names the field');
    if (authenticated) {
      declare(401, 'unauthorized: no API key, or an unknown or revoked one');
      declare(403, 'forbidden: the key may not do this (admin only, or another agent)');
      declare(404, 'not_found: what the path names does not exist (or is not visible to this key)');
    }
    if (methods.some((m) => m !== 'GET' && m !== 'HEAD')) {
      declare(413, 'payload_too_large: the body is over the limit');
      declare(415, 'unsupported_media_type: send application/json');
    }
    declare(429, 'too_many_connections: this client address already has the most open requests it may (through a trusted proxy)');
    declare(503, 'unavailable: the database is away; retry after Retry-After seconds (nothing was changed)');
    // A /v1 route without query parameters refuses one (400 naming it), as the routes with some
    // refuse an unknown one: a misspelt `?limit=` is never silently ignored.
    const querystring = schema.querystring ?? (authenticated ? NoQuery : undefined);
    route.schema = { ...schema, ...(querystring && { querystring }), response };
  });
}

/**
 * Route schemas → OpenAPI (the zod schemas made JSON Schema), but a route taking no body (NoBody)
 * shows none, and what no response schema can say: a route marked `sse` answers 200 as
 * `text/event-stream` — beside its JSON 200 where it has one (the logs route: a page, or with
 * follow=true a stream).
 */
export const openApiTransform: SwaggerTransform = (input) => {
  const out = jsonSchemaTransform(input);
  // A route that takes no body documents none (its schema only refuses fields sent anyway).
  if ((input.schema as { body?: unknown }).body === NoBody) {
    const { body: _none, ...rest } = out.schema as Record<string, unknown>;
    out.schema = rest;
  }
  const sse = input.route.config?.sse;
  if (sse === undefined) return out;
  const schema = out.schema as Record<string, any>;
  const json = schema.response?.[200];
  const content: Record<string, unknown> = {};
  if (json !== undefined) content['application/json'] = { schema: json };
  content['text/event-stream'] = { schema: { type: 'string', description: sse } };
  const description = json === undefined ? sse : `${json.description ?? 'JSON'}, or ${sse}`;
  return { ...out, schema: { ...schema, response: { ...schema.response, 200: { description, content } } } };
};
