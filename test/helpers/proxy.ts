import net from 'node:net';

/**
 * A TCP proxy to a real server that a test can cut and restore: `down()` closes the listener and
 * every open connection (as a database restart does to its clients), `up()` listens again on the
 * same port.
 */
export interface Proxy {
  port: number;
  down(): Promise<void>;
  up(): Promise<void>;
  close(): Promise<void>;
}

/** `listenPort`: the port to listen on (default: one the system picks). */
export async function startProxy(target: { host: string; port: number }, listenPort = 0): Promise<Proxy> {
  const sockets = new Set<net.Socket>();
  let server: net.Server | undefined;
  let port = listenPort;
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      const s = net.createServer((client) => {
        const upstream = net.connect(target.port, target.host);
        for (const sock of [client, upstream]) {
          sockets.add(sock);
          sock.on('close', () => sockets.delete(sock));
          sock.on('error', () => sock.destroy());
        }
        client.pipe(upstream).pipe(client);
        client.on('close', () => upstream.destroy());
        upstream.on('close', () => client.destroy());
      });
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => {
        port = (s.address() as net.AddressInfo).port;
        server = s;
        resolve();
      });
    });
  await listen();
  const down = async () => {
    const s = server;
    server = undefined;
    for (const sock of sockets) sock.destroy();
    if (s) await new Promise<void>((r) => s.close(() => r()));
  };
  return {
    get port() {
      return port;
    },
    down,
    up: listen,
    close: down,
  };
}
