/**
 * Plain requests over node:http (keep-alive connections of Node's global agents), for the
 * client in Node: the CLI and the worker SDK. Two reasons:
 * Node loads fetch's implementation (undici) on first use, a large share of a one-request
 * command's start; and per request fetch costs the client more — a submit to a local server
 * takes noticeably longer through fetch than through this. Streams (`--follow`) still use
 * fetch. Not for the browser: the dashboard's client keeps fetch, BatonClient's default.
 */
import http from 'node:http';
import https from 'node:https';
import type { Transport } from '../client.ts';

interface Origin {
  send: typeof http.request;
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
  return { send: u.protocol === 'https:' ? https.request : http.request, options: originOptions(u) };
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
    const req = origin.send({ ...origin.options, path, method, headers: sized, signal }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
