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

export const nodeHttpTransport: Transport = ({ url, method, headers, body, signal }) =>
  new Promise((resolve, reject) => {
    const target = new URL(url);
    const send = target.protocol === 'https:' ? https.request : http.request;
    const sized = body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) };
    const req = send(target, { method, headers: sized, signal }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
