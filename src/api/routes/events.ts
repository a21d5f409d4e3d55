import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { ServerResponse } from 'node:http';
import { z } from 'zod';
import { requireAgentAccess } from '../auth.ts';
import { closeOnRevoke } from '../revocation.ts';
import { AgentName } from '../schemas.ts';
import type { ApiDeps } from '../deps.ts';

/**
 * Comment lines keep idle proxies and browsers from closing the stream. 15 s is under the
 * common 30-60 s idle timeouts; a dead client is noticed by the failed write at the latest then.
 */
export const SSE_HEARTBEAT_MS = 15_000;

/**
 * Streams written in one turn of the event loop when changes fan out: each is a socket write, so
 * a slice of this many holds the loop for a bounded time whatever the number of open streams.
 */
const FANOUT_SLICE = 32;

/** Unsent bytes one stream may hold (about 8,000 events) before the server gives up on it. */
const MAX_BUFFERED_BYTES = 1024 * 1024;

export const EventsQuery = z.strictObject({
  agent: AgentName.optional().describe('only changes of this agent'),
});

/** What each `execution` event carries: enough to refetch, never payloads or results. */
export const ExecutionChanged = z.object({ id: z.string(), agent: z.string(), status: z.string(), at: z.string() });

interface Client {
  res: ServerResponse;
  agent?: string;
}

/** Open an SSE response on a hijacked reply: headers, retry hint, and a first comment (false for HEAD: ended, nothing to stream). */
export function openSse(res: ServerResponse, method: string): boolean {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
  });
  // HEAD (which Fastify serves with the GET handler): the headers, then the end, not a stream held open.
  if (method === 'HEAD') {
    res.end();
    return false;
  }
  res.write('retry: 3000\n: connected\n\n');
  return true;
}

/**
 * GET /v1/events: Server-Sent Events of execution status changes from every process sharing the
 * store (the engine's `execution:changed` is fed by store signals). One engine listener fans out
 * to every open stream; a stream's listener is gone when its socket closes.
 */
const streamsByEngine = new WeakMap<object, Set<Client>>();
/** Open /v1/events streams served for this engine (tests check that disconnects are cleaned up). */
export const openEventStreams = (engine: object): number => streamsByEngine.get(engine)?.size ?? 0;

export const eventRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, { engine }) => {
  const clients = new Set<Client>();
  streamsByEngine.set(engine, clients);
  const send = (c: Client, chunk: string | Buffer) => {
    // A client that stopped reading would buffer events in memory without bound: drop it; an
    // EventSource reconnects and refetches.
    if (c.res.writableLength > MAX_BUFFERED_BYTES) {
      clients.delete(c);
      c.res.destroy();
      return;
    }
    c.res.write(chunk);
  };
  // A batch of 1,000 submits is 1,000 changes in a few turns: one write per stream per change held
  // the loop far too long with hundreds of streams. The changes of one turn go out together instead, one
  // write per stream, and streams with the same filter share one buffer. Each write is a socket
  // write of its own (Node's writev on the next tick), so the streams are written FANOUT_SLICE at a
  // time, a turn of the event loop apart: with hundreds of streams, requests are answered between
  // slices rather than after the whole fan-out. Changes that come meanwhile wait for the fan-out in
  // hand to end, so each stream gets them in order, and in fewer, larger writes.
  let pending: Array<{ agent: string; line: string }> = [];
  let fanning = false;
  const flush = () => {
    const changes = pending;
    pending = [];
    const chunks = new Map<string | undefined, Buffer>();
    const targets = [...clients];
    let i = 0;
    const slice = () => {
      for (const end = Math.min(i + FANOUT_SLICE, targets.length); i < end; i++) {
        const c = targets[i]!;
        if (!clients.has(c)) continue; // closed meanwhile
        let chunk = chunks.get(c.agent);
        if (!chunk) {
          chunk = Buffer.from(changes.flatMap((e) => (!c.agent || e.agent === c.agent ? [e.line] : [])).join(''));
          chunks.set(c.agent, chunk);
        }
        if (chunk.length > 0) send(c, chunk);
      }
      if (i < targets.length) setImmediate(slice);
      else if (pending.length > 0) setImmediate(flush);
      else fanning = false;
    };
    slice();
  };
  const onChanged = (e: { id: string; agent: string; status: string }) => {
    if (clients.size === 0) return; // a scheduler burst is thousands of changes: text only when someone listens
    // The documented fields only (the engine's event also says whether this process made the change).
    const line = `event: execution\ndata: ${JSON.stringify({ id: e.id, agent: e.agent, status: e.status, at: new Date(engine.now()).toISOString() })}\n\n`;
    if (pending.push({ agent: e.agent, line }) === 1 && !fanning) {
      fanning = true;
      setImmediate(flush);
    }
  };
  engine.events.on('execution:changed', onChanged);
  const heartbeat = setInterval(() => {
    for (const c of clients) send(c, ': ping\n\n');
  }, SSE_HEARTBEAT_MS);
  heartbeat.unref();

  // Open streams would hold app.close() forever: end them before the server stops listening.
  app.addHook('preClose', async () => {
    for (const c of clients) c.res.end();
    clients.clear();
  });
  app.addHook('onClose', async () => {
    clearInterval(heartbeat);
    engine.events.off('execution:changed', onChanged);
  });

  app.get(
    '/v1/events',
    {
      config: {
        agentKeys: true,
        sse: 'a stream of `event: execution` messages, each `data:` {id, agent, status, at}; a `: ping` comment every 15 s',
      },
      schema: {
        tags: ['events'],
        summary:
          'Server-Sent Events of execution status changes (event: execution). Browsers may pass the key as ?key= (only here and on the logs stream)',
        querystring: EventsQuery,
      },
    },
    async (req, reply) => {
      // An agent-scoped key sees only its own agent's changes (another agent named: 403); a filter
      // naming an unknown agent is a 404, not a stream that stays silent.
      const named = req.query.agent;
      if (named !== undefined) {
        requireAgentAccess(req, named);
        await engine.agents.require(named);
      }
      const agent = named ?? (req.principal.scope === 'agent' ? req.principal.agent! : undefined);
      reply.hijack();
      if (!openSse(reply.raw, req.method)) return;
      const client: Client = { res: reply.raw, agent };
      clients.add(client);
      const offRevoke = closeOnRevoke(engine, req.principal.keyId, reply.raw);
      const drop = () => {
        clients.delete(client);
        offRevoke();
      };
      req.raw.on('close', drop);
      reply.raw.on('close', drop);
      reply.raw.on('error', drop);
    },
  );
};
