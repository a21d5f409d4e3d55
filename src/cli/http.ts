/**
 * The CLI's transport for plain requests: node:http instead of the global fetch. Node loads
 * fetch's implementation (undici) on first use, ~130 ms of a one-request command's start on this
 * kind of machine (docs/benchmarks.md, "CLI start-up"). Streams (`--follow`) still use fetch.
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
