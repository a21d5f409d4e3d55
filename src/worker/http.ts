/**
 * Plain requests over node:http (keep-alive connections of this module's own agents), for the
 * client in Node: the CLI and the worker SDK. Two reasons:
 * Node loads fetch's implementation (undici) on first use, a large share of a one-request
 * command's start; and per request fetch costs the client more — a submit to a local server
 * takes noticeably longer through fetch than through this. Streams (`--follow`) still use
 * fetch. Not for the browser: the dashboard's client keeps fetch, BatonClient's default.
 */
import http from 'node:http';
import https from 'node:https';
import type { Transport } from '../client.ts';

/**
 * The connections this process's requests go through, kept open between requests, in two pools
 * per protocol. Node's global agent closes a connection after 5 s without a request; a worker
 * swings between parked long-poll claims (a claim waits up to 20 s by default) and bursts of
 * completions, so with that limit its completions would find their connections closed and open
 * new ones (a TCP connect and the server's accept per burst). Here an idle connection lives 60 s
 * (below the server's 75 s keep-alive; the server's `Keep-Alive: timeout` hint shortens it when
 * a server says less).
 *
 * - `wait`: claims, which may park on the server for their long-poll. Not capped: each of a
 *   worker's agents has at most one claim out, and no other request ever waits behind them.
 * - `quick`: everything else (completions, heartbeats, submits). At most QUICK_SOCKETS at once;
 *   beyond that a request waits for one of them to answer: a quick request, never a long-poll.
 *   Without the cap a worker's burst of several hundred completions would open as many
 *   connections, past the server's limit per client address (256 by default), which closes
 *   the excess.
 *
 * Idle connections do not keep the process alive.
 */
const QUICK_SOCKETS = 64;
const KEEP = { keepAlive: true, timeout: 60_000, maxFreeSockets: 1024, scheduling: 'lifo' } as const;
export const connectionPools = {
  http: { quick: new http.Agent({ ...KEEP, maxSockets: QUICK_SOCKETS }), wait: new http.Agent(KEEP) },
  https: { quick: new https.Agent({ ...KEEP, maxSockets: QUICK_SOCKETS }), wait: new https.Agent(KEEP) },
};

/** Close this process's pooled connections (a benchmark between phases, a test at its end). */
export function closeConnections(): void {
  for (const pools of Object.values(connectionPools)) for (const agent of Object.values(pools)) agent.destroy();
}

/** Requests that may park on the server (a claim's long-poll) take the `wait` pool. */
const parks = (path: string) => path.endsWith('/claim');

interface Origin {
  send: typeof http.request;
  pools: { quick: http.Agent; wait: http.Agent };
  options: Pick<http.RequestOptions, 'protocol' | 'hostname' | 'port' | 'auth'>;
}

/** Parsed server origins: a worker sends every request to one, so its URL is parsed once, not per request. */
const origins = new Map<string, Origin>();

/** Where a request for `url` goes; paths of printable ASCII (what BatonClient sends) skip the URL parser. */
function target(url: string): { origin: Origin; path: string } {
  const scheme = url.indexOf('://');
  const slash = scheme < 0 ? -1 : url.indexOf('/', scheme + 3);
  const path = slash < 0 ? '/' : url.slice(slash);
  if (scheme < 0 || !/^[\x21-\x7e]*$/.test(path)) {
    const u = new URL(url);
    return { origin: originOf(u), path: u.pathname + u.search };
  }
  const base = slash < 0 ? url : url.slice(0, slash);
  let origin = origins.get(base);
  if (!origin) {
    origin = originOf(new URL(base));
    if (origins.size < 64) origins.set(base, origin);
  }
  return { origin, path };
}

function originOf(u: URL): Origin {
  const tls = u.protocol === 'https:';
  return { send: tls ? https.request : http.request, pools: tls ? connectionPools.https : connectionPools.http, options: originOptions(u) };
}

function originOptions(u: URL): Origin['options'] {
  return {
    protocol: u.protocol,
    // An IPv6 literal is bracketed in a URL, bare in a request's hostname.
    hostname: u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname,
    port: u.port || undefined,
    auth: u.username || u.password ? `${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}` : undefined,
  };
}

export const nodeHttpTransport: Transport = ({ url, method, headers, body, signal }) =>
  new Promise((resolve, reject) => {
    const { origin, path } = target(url);
    const sized = body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) };
    const agent = parks(path) ? origin.pools.wait : origin.pools.quick;
    const req = origin.send({ ...origin.options, agent, path, method, headers: sized, signal }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
