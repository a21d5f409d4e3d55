/**
 * MCP over Streamable HTTP at /mcp, stateless: each POST gets a fresh MCP server whose tools call
 * this same API in-process (Fastify inject) with the caller's own key, so scopes apply exactly
 * as over HTTP and nothing crosses the network twice.
 */
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply } from 'fastify';
import type { KeyStore } from '../auth/keys.ts';
import { BatonClient } from '../client.ts';
import { createMcpServer } from './tools.ts';

/** A fetch that answers from the app itself, without a socket. */
export function injectFetch(app: FastifyInstance): typeof fetch {
  return (async (input: string | URL | Request, init: RequestInit = {}) => {
    const url = new URL(String(input));
    const res = await app.inject({
      method: (init.method ?? 'GET') as 'GET',
      url: url.pathname + url.search,
      headers: init.headers as Record<string, string>,
      payload: init.body as string | undefined,
    });
    const body = res.statusCode === 204 || res.statusCode === 304 ? null : res.body;
    return new Response(body, { status: res.statusCode, headers: res.headers as Record<string, string> });
  }) as typeof fetch;
}

export const mcpRoutes: FastifyPluginAsync<{ keys: KeyStore; root: () => FastifyInstance }> = async (app, { keys, root }) => {
  app.post('/mcp', { schema: { hide: true } }, async (req, reply) => {
    const header = req.headers.authorization;
    const key = header?.startsWith('Bearer ') ? header.slice(7).trim() : undefined;
    await keys.verify(key); // 401 here, before any MCP framing, for a missing or bad key
    const client = new BatonClient({ server: 'http://baton.internal', key, via: 'mcp', fetch: injectFetch(root()) });
    const server = createMcpServer(client);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    reply.hijack();
    reply.raw.on('close', () => {
      void transport.close();
      void server.close();
    });
    try {
      await server.connect(transport);
      await transport.handleRequest(req.raw, reply.raw, req.body);
    } catch (err) {
      req.log.error({ err }, 'mcp request failed');
      if (!reply.raw.headersSent) {
        reply.raw.writeHead(500, { 'content-type': 'application/json' });
        reply.raw.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32603, message: 'internal error; see the server log' }, id: null }));
      } else if (!reply.raw.writableEnded) reply.raw.end();
    }
  });
  // Stateless: no server-initiated stream and no session to delete.
  const notAllowed = async (_req: unknown, reply: FastifyReply) =>
    reply
      .code(405)
      .header('allow', 'POST')
      .send({ error: 'method_not_allowed', message: 'this MCP endpoint is stateless: POST JSON-RPC messages to /mcp' });
  app.get('/mcp', { schema: { hide: true } }, notAllowed);
  app.delete('/mcp', { schema: { hide: true } }, notAllowed);
};
