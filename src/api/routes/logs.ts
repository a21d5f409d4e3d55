import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { ServerResponse } from 'node:http';
import { NotFound, TooManyStreams } from '../../domain/errors.ts';
import { isStoreUnavailable } from '../../store/unavailable.ts';
import { closeOnRevoke } from '../revocation.ts';
import { isTerminal } from '../../domain/states.ts';
import type { Engine } from '../../engine/engine.ts';
import { requireExecutionAccess } from '../auth.ts';
import { ErrorBody, ExecutionParams } from '../schemas.ts';
import { LogAppendBody, LogAppendResponse, LogPage, LogQuery } from '../schemas/logs.ts';
import type { ApiDeps } from '../deps.ts';
import { lineView, LogTails } from '../log-tails.ts';
import { largeAnswerWhen } from '../answer-lane.ts';
import { openSse, SSE_HEARTBEAT_MS } from './events.ts';

/** Agent-scoped keys reach only their agent's executions; others look nonexistent to them. */
async function executionStatus(engine: Engine, req: FastifyRequest, id: string): Promise<string> {
  const row = await engine.executionHead(id);
  if (!row || (req.principal.scope === 'agent' && row.agent !== req.principal.agent)) throw new NotFound('execution', id);
  return row.status;
}

export const logRoutes: FastifyPluginAsyncZod<ApiDeps> = async (app, { engine }) => {
  const streams = new Set<ServerResponse>();
  const tails = new LogTails(engine);
  app.addHook('preClose', async () => {
    for (const s of streams) s.end();
    streams.clear();
  });

  app.post(
    '/v1/executions/:id/logs',
    {
      config: { agentKeys: true },
      bodyLimit: 4 * 1024 * 1024,
      schema: {
        tags: ['worker protocol'],
        summary: 'Append output lines (fenced by the lease token; secrets are redacted before storage)',
        params: ExecutionParams,
        body: LogAppendBody,
        response: { 200: LogAppendResponse, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (req) => {
      await requireExecutionAccess(engine, req, req.params.id);
      const lines = req.body.lines.map((l) => ({ stream: l.stream ?? ('stdout' as const), line: l.line }));
      return engine.logs.append(req.params.id, req.body.lease_token, lines);
    },
  );

  app.get(
    '/v1/executions/:id/logs',
    {
      config: {
        agentKeys: true,
        // A page, not a stream: a stream's lines go out a page of 64 at a time as they come.
        largeAnswer: largeAnswerWhen(LogQuery, (query) => !query.follow),
        sse: 'with follow=true: `event: log` per line (`id:` its seq, `data:` the line as in a page), then one `event: end` {execution_id, status, next_after} once the execution has ended and every line was sent',
      },
      schema: {
        tags: ['executions'],
        summary: "Read an execution's log lines; follow=true streams them (SSE: event log, then event end when the execution ends)",
        params: ExecutionParams,
        querystring: LogQuery,
        response: { 200: LogPage, 404: ErrorBody, 429: ErrorBody.describe('too_many_streams (follow=true)') },
      },
    },
    async (req, reply) => {
      const id = req.params.id;
      const status = await executionStatus(engine, req, id);
      if (!req.query.follow) {
        const page = await engine.logs.read(id, { after: req.query.after, limit: req.query.limit });
        const last = page.lines.at(-1)?.seq ?? req.query.after ?? 0;
        return { execution_id: id, status, lines: page.lines.map(lineView), next_after: last, truncated: page.truncated };
      }
      if (tails.followers(id) >= MAX_FOLLOWERS) throw new TooManyStreams(id, MAX_FOLLOWERS);
      return follow(engine, tails, id, req.query.after ?? 0, req, reply, streams);
    },
  );
};

/**
 * Follow streams one execution may have in one process. Followers share each read (log-tails.ts),
 * yet every append still costs one write per follower; past this a client reads pages instead.
 */
export const MAX_FOLLOWERS = 100;

/** Lines per read while following (each at most LOG_LIMITS.maxLineBytes: a page is ≤ 1 MiB). */
const FOLLOW_PAGE_LINES = 64;
/**
 * Bytes a follow stream may have waiting in its socket before it reads on: with the page, a
 * stream holds about 1.25 MiB at most however slowly its client reads (without a bound, streams
 * that never read grow the server's memory by the log's size each).
 */
const FOLLOW_BUFFER_BYTES = 256 * 1024;

/**
 * Stream lines as they are appended, then `event: end` once the execution is terminal and every
 * line written before that has been sent. Wake-ups come from the store's `log` topic and the
 * engine's `execution:changed` (both cross-process on PostgreSQL); a slow poll covers a lost signal.
 */
async function follow(
  engine: Engine,
  tails: LogTails,
  id: string,
  after: number,
  req: FastifyRequest,
  reply: FastifyReply,
  streams: Set<ServerResponse>,
): Promise<void> {
  reply.hijack();
  const res = reply.raw;
  if (!openSse(res, req.method)) return;
  streams.add(res);
  let closed = false;
  let wake: (() => void) | undefined;
  const { tail, leave } = tails.join(id, () => wake?.());
  const onClose = () => {
    closed = true;
    wake?.();
  };
  closeOnRevoke(engine, req.principal.keyId, res);
  req.raw.on('close', onClose);
  res.on('close', onClose);
  res.on('error', onClose);
  let lastWrite = Date.now();
  try {
    while (!closed) {
      // Every change signalled up to here is seen by the reads below.
      const seen = tail.gen;
      // Status first: lines appended before the execution ended are all read below.
      const row = await tail.status(seen);
      const done = !row || isTerminal(row.status);
      for (;;) {
        const page = await tail.page(after, FOLLOW_PAGE_LINES, seen);
        if (page.lines > 0) await tails.writeTurn(page.text.length);
        if (page.lines > 0 && !closed) {
          res.write(page.text);
          after = page.last;
          lastWrite = Date.now();
        }
        // A client that reads slowly (or not at all) gets the next page when it has taken this one:
        // the lines wait in the database, not in this process's memory.
        while (res.writableLength > FOLLOW_BUFFER_BYTES && !closed)
          await new Promise<void>((resolve) => {
            const done = () => {
              res.off('drain', done);
              wake = undefined;
              resolve();
            };
            res.on('drain', done);
            wake = done;
          });
        if (page.lines < FOLLOW_PAGE_LINES || closed) break;
      }
      if (done) {
        res.write(`event: end\ndata: ${JSON.stringify({ execution_id: id, status: row?.status ?? 'unknown', next_after: after })}\n\n`);
        break;
      }
      if (tail.gen === seen) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, 1000);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
      }
      if (Date.now() - lastWrite >= SSE_HEARTBEAT_MS) {
        res.write(': ping\n\n');
        lastWrite = Date.now();
      }
    }
  } catch (err) {
    // Never a database message to the client: a code and a fixed sentence.
    const unavailable = isStoreUnavailable(err);
    if (!unavailable) req.log.error({ err }, 'log stream failed');
    if (!closed)
      res.write(
        `event: error\ndata: ${JSON.stringify(unavailable ? { error: 'unavailable', message: 'the database is unavailable right now; reconnect shortly' } : { error: 'internal', message: 'the log stream failed; see the server log' })}\n\n`,
      );
  } finally {
    leave();
    streams.delete(res);
    if (!res.writableEnded) res.end();
  }
}
