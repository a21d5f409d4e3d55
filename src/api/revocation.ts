import type { ServerResponse } from 'node:http';
import type { KeyStore } from '../auth/keys.ts';
import { Unauthorized } from '../domain/errors.ts';
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

/**
 * Stop a parked (long-poll) claim when the key that made it is revoked — by any process, or with
 * its agent, which also keeps it from serving a later agent of the same name: the claim admits
 * nothing more and answers 401. A key already seen revoked is refused before the claim parks.
 */
export function endClaimOnRevoke(
  engine: Engine,
  keys: KeyStore,
  keyId: string,
  abort: AbortController,
): { revoked: () => boolean; off: () => void } {
  let revoked = keys.wasRevoked(keyId);
  if (revoked) throw new Unauthorized('the API key is unknown or revoked');
  const off = engine.subscribe('key', (id) => {
    if (id !== keyId) return;
    revoked = true;
    abort.abort();
  });
  return { revoked: () => revoked, off };
}
