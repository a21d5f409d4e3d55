/**
 * MCP over Streamable HTTP at /mcp, stateless: each POST gets a fresh MCP server whose tools call
 * this same API in-process (Fastify inject) with the caller's own key, so scopes apply exactly
 * as over HTTP and nothing crosses the network twice. The messages of a batch are paced and their
 * answers bounded (pacing.ts).
 */
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply } from 'fastify';
import type { KeyStore } from '../auth/keys.ts';
import { BatonClient, type Transport } from '../client.ts';
import { ownTurn, paceMessages } from './pacing.ts';
import { createMcpServer, readOnlyTools } from './tools.ts';

/** An API answer this large is handed to the tool (which parses it) a turn after Fastify serialised it. */
const LARGE_ANSWER_CHARS = 64 * 1024;

/**
 * Requests answered by the app itself, without a socket, and without a fetch Response between
 * (its body would be encoded and decoded once more before the client parses it). One POST's
 * requests run one at a time, each starting in a turn of its own: the calls of a batch that come
 * due together (trigger_schedule calls woken by one group commit, their polls, their final reads)
 * ran their handlers back to back, and with a large payload one turn held the event loop too long.
 */
export function injectTransport(app: FastifyInstance): Transport {
  let previous: Promise<unknown> = Promise.resolve();
  return ({ url, method, headers, body }) => {
    const answer = previous.then(async () => {
      await ownTurn();
      const u = new URL(url);
      const res = await app.inject({ method: method as 'GET', url: u.pathname + u.search, headers, payload: body });
      if (res.body.length > LARGE_ANSWER_CHARS) await ownTurn();
      return { status: res.statusCode, text: res.body };
    });
    previous = answer.catch(() => undefined);
    return answer;
  };
}

export const mcpRoutes: FastifyPluginAsync<{ keys: KeyStore; root: () => FastifyInstance }> = async (app, { keys, root }) => {
  app.post('/mcp', { schema: { hide: true } }, async (req, reply) => {
    const header = req.headers.authorization;
    const key = header?.startsWith('Bearer ') ? header.slice(7).trim() : undefined;
    await keys.verify(key); // 401 here, before any MCP framing, for a missing or bad key
    const client = new BatonClient({ server: 'http://baton.internal', key, via: 'mcp', transport: injectTransport(root()) });
    const server = createMcpServer(client);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    reply.hijack();
    reply.raw.on('close', () => {
      void transport.close();
      void server.close();
    });
    try {
      await server.connect(transport);
      paceMessages(transport, readOnlyTools(server));
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
