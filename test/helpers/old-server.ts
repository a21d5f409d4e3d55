/**
 * A server older than the SDK, for the worker's tests: a small real HTTP proxy to a real server
 * that answers the routes it lacks as Baton's router does (404 `no route`), passes everything else
 * through, and counts the requests by route.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface OldServer {
  url: string;
  /** Requests by `METHOD path`, with ids and agent names in the path replaced by `:x`. */
  counts: Map<string, number>;
  close(): Promise<void>;
}

/** A proxy to `target` whose router has none of `missing` (`METHOD /path`): those answer 404 as Baton's router does. */
export async function oldServer(target: string, missing: readonly string[]): Promise<OldServer> {
  const upstream = new URL(target);
  const agent = new http.Agent({ keepAlive: true });
  const counts = new Map<string, number>();
  const server = http.createServer((req, res) => {
    const path = req.url!.split('?')[0]!;
    const route = `${req.method} ${path.replace(/^(\/v1\/(?:agents|executions))\/[^/]+/, '$1/:x')}`;
    counts.set(route, (counts.get(route) ?? 0) + 1);
    if (missing.includes(`${req.method} ${path}`)) {
      req.resume();
      res.writeHead(404, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ error: 'not_found', message: `no route ${req.method} ${path}` }));
    }
    const out = http.request(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers, agent },
      (answer) => {
        res.writeHead(answer.statusCode!, answer.headers);
        answer.pipe(res);
      },
    );
    out.on('error', () => res.destroy());
    req.pipe(out);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    counts,
    close: () =>
      new Promise<void>((r) => {
        agent.destroy();
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
