import type { ServerResponse } from 'node:http';
import type { Engine } from '../engine/engine.ts';

/**
 * End an open stream (SSE) when the key that opened it is revoked — by any process, or with its
 * agent. The stream gets a last `event: error` saying why; an EventSource that reconnects is then
 * refused with 401. Returns the unsubscribe to call when the stream closes on its own.
 */
export function closeOnRevoke(engine: Engine, keyId: string, res: ServerResponse): () => void {
  const off = engine.subscribe('key', (revoked) => {
    if (revoked !== keyId || res.writableEnded) return;
    res.write(
      `event: error\ndata: ${JSON.stringify({ error: 'unauthorized', message: 'the API key that opened this stream was revoked' })}\n\n`,
    );
    res.end();
  });
  res.once('close', off);
  return off;
}
