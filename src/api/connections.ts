import type { FastifyInstance } from 'fastify';
import type { Socket } from 'node:net';
import type { ConnectionLimits } from './deps.ts';

/**
 * Socket-level defences, so one client cannot stall the server:
 * - at most `maxConnectionsPerAddress` open connections per remote address (more are closed at once);
 * - an answer given before the request body was read (401, 404, 413 …) closes the connection
 *   instead of reading, and waiting for, the rest of the body.
 */
export function guardConnections(app: FastifyInstance, limits: Pick<ConnectionLimits, 'maxConnectionsPerAddress'>): void {
  const open = new Map<string, number>();
  app.server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    const n = (open.get(address) ?? 0) + 1;
    if (n > limits.maxConnectionsPerAddress) {
      socket.destroy();
      return;
    }
    open.set(address, n);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left <= 0) open.delete(address);
      else open.set(address, left);
    });
  });
  app.addHook('onSend', async (req, reply) => {
    // `complete` is false while the client still owes body bytes we are not going to read.
    if (reply.statusCode >= 400 && !req.raw.complete) reply.header('connection', 'close');
  });
}
