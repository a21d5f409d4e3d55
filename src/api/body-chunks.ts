import { errorCodes, type FastifyRequest } from 'fastify';
import type { IncomingMessage } from 'node:http';

/**
 * A request body as the chunks it arrived in, with Fastify's own checks for a body read as text
 * (its `parseAs: 'string'`): 413 past the route's body limit (by Content-Length, or as it comes),
 * 400 when the bytes differ from Content-Length or the stream fails. Not joined: a large body can
 * then go to the JSON thread without the event loop making a copy of all of it
 * (json-off-thread.ts, parseBytesAroundRawPaths).
 */
export function readChunks(
  req: FastifyRequest,
  payload: IncomingMessage & { receivedEncodedLength?: number },
  done: (err: Error | null, chunks: Buffer[], length: number) => void,
): void {
  const limit = req.routeOptions.bodyLimit!;
  const contentLength = Number(req.headers['content-length']);
  if (contentLength > limit) return done(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE(), [], 0);
  let received = 0;
  const chunks: Buffer[] = [];
  const stop = () => {
    payload.removeListener('data', onData);
    payload.removeListener('end', onEnd);
    payload.removeListener('error', onEnd);
  };
  function onData(chunk: Buffer | string) {
    // A custom preParsing stream may emit strings.
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    received += bytes.length;
    if (received > limit || (payload.receivedEncodedLength ?? 0) > limit) {
      stop();
      return done(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE(), [], 0);
    }
    chunks.push(bytes);
  }
  function onEnd(err?: Error & { statusCode?: number }) {
    stop();
    if (err != null) {
      if (!(typeof err.statusCode === 'number' && err.statusCode >= 400)) err.statusCode = 400;
      return done(err, [], 0);
    }
    if (!Number.isNaN(contentLength) && (payload.receivedEncodedLength || received) !== contentLength) {
      return done(new errorCodes.FST_ERR_CTP_INVALID_CONTENT_LENGTH(), [], 0);
    }
    done(null, chunks, received);
  }
  payload.on('data', onData);
  payload.on('end', onEnd);
  payload.on('error', onEnd);
  payload.resume();
}
