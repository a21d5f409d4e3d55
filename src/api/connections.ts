import type { FastifyInstance } from 'fastify';
import { BlockList, type Socket } from 'node:net';
import type { TrustedProxy } from '../config.ts';
import { countConnectionRefused } from '../metrics.ts';
import type { ConnectionLimits } from './deps.ts';

/** Refusals are logged at most this often (with how many there were since the last line): a flood must not flood the log. */
const REFUSAL_LOG_INTERVAL_MS = 60_000;

/** Whether a peer address is one of the trusted proxies (an IPv4-mapped IPv6 peer matches its IPv4 subnet). */
export function proxyMatcher(proxies: readonly TrustedProxy[]): (address: string | undefined) => boolean {
  if (proxies.length === 0) return () => false;
  const list = new BlockList();
  for (const p of proxies) list.addSubnet(p.address, p.prefix, p.family);
  return (address) => address !== undefined && list.check(address, address.includes(':') ? 'ipv6' : 'ipv4');
}

/**
 * Socket-level defences, so one client cannot stall the server:
 * - at most `maxConnectionsPerAddress` open connections per remote address (more are closed at once).
 *   A trusted proxy's connections carry many clients, so they are not counted by its address:
 *   each request through one counts against its client's address (X-Forwarded-For, as `req.ip`
 *   reads it) while it is open, and one over the limit is answered 429 too_many_connections;
 * - an answer given before the request body was read (401, 404, 413 …) closes the connection
 *   instead of reading, and waiting for, the rest of the body.
 */
export function guardConnections(
  app: FastifyInstance,
  limits: Pick<ConnectionLimits, 'maxConnectionsPerAddress'>,
  trusted: (address: string | undefined) => boolean,
): void {
  const max = limits.maxConnectionsPerAddress;
  const refused = refusalLog(app, max);
  const open = new Map<string, number>();
  const hold = (address: string): boolean => {
    const n = (open.get(address) ?? 0) + 1;
    if (n > max) return false;
    open.set(address, n);
    return true;
  };
  const letGo = (address: string) => {
    const left = (open.get(address) ?? 1) - 1;
    if (left <= 0) open.delete(address);
    else open.set(address, left);
  };
  app.server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    if (trusted(address)) return;
    if (!hold(address)) {
      refused(address, 'socket');
      socket.destroy();
      return;
    }
    socket.once('close', () => letGo(address));
  });
  // Client addresses through a proxy, and the peers themselves, share one count: a client that
  // reaches the server both ways holds at most `max` in all.
  // Hooks that run for every request take a callback rather than returning a promise: one
  // promise and one microtask turn fewer per hook and request.
  app.addHook('onRequest', (req, reply, done) => {
    if (!trusted(req.socket.remoteAddress)) return done();
    const client = req.ip;
    if (!hold(client)) {
      refused(client, 'proxy');
      // Answered here: the request goes no further (done is not called).
      void reply.code(429).send({
        error: 'too_many_connections',
        message: `this client address already has ${max} open requests, the most one address may hold (BATON_MAX_CONNECTIONS_PER_ADDRESS)`,
        limit: max,
      });
      return;
    }
    reply.raw.once('close', () => letGo(client));
    done();
  });
  app.addHook('onSend', (req, reply, payload, done) => {
    // `complete` is false while the client still owes body bytes we are not going to read.
    if (reply.statusCode >= 400 && !req.raw.complete) reply.header('connection', 'close');
    done(null, payload);
  });
}

/** Counts every refusal; logs the first, then at most one line an interval with the count since the last. */
function refusalLog(app: FastifyInstance, max: number) {
  let unlogged = 0;
  let loggedAt = -Infinity;
  return (address: string, via: 'socket' | 'proxy') => {
    countConnectionRefused(via);
    unlogged++;
    const now = Date.now();
    if (now - loggedAt < REFUSAL_LOG_INTERVAL_MS) return;
    app.log.warn(
      { address, via, refused: unlogged, limit: max, setting: 'BATON_MAX_CONNECTIONS_PER_ADDRESS' },
      'connections refused over the per-address limit',
    );
    loggedAt = now;
    unlogged = 0;
  };
}
