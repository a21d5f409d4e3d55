/**
 * How fast GET /healthz answers while a `baton up` (a spawned process of its own) is under load:
 * (a) four clients each sending ~7.8 MiB batch submits back to back, (b) 190 open event streams
 * (GET /v1/events) while tasks are submitted in batches and claimed and completed, so every
 * change fans out to every stream, (c) 150 connections each asking for a 5 MiB log page or a
 * 4 MB execution and never reading it (slow readers). A loop here asks /healthz one request after
 * another; the figures are its latency percentiles per scenario. Goal: the worst ≤ 100 ms.
 *
 *   node --import tsx bench/healthz-load.ts [sqlite|postgres] [port] [batches|streams|readers]
 *
 * A measurement, not a test: run it on an otherwise quiet machine and read the spread. With
 * BENCH_LOOP_STALLS=<file> (Linux), each scenario also prints the server's event-loop stalls over
 * 50 ms in it, split into time on a CPU and time waiting for one (bench/lib/loop-stalls.mjs): what
 * the server did on its loop against what the machine's other threads took.
 */
import { existsSync, readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { Worker } from 'node:worker_threads';
import { BATCH } from '../src/domain/batch.ts';
import { DEFAULTS } from '../src/config.ts';
import type { StoreKind } from '../src/store/adapter.ts';
import { startServer } from './lib/server.ts';
import { freshDb } from './lib/stores.ts';

const store = (process.argv[2] ?? 'sqlite') as StoreKind;
const port = Number(process.argv[3] ?? 0);
/** `batches`, `streams` or `readers`: only that scenario (default all three). */
const only = process.argv[4];
const PG_URL = process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? 0 : s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const round = (x: number) => Math.round(x * 10) / 10;

/** The server's event-loop stalls over 50 ms between `from` and `to` (epoch ms), when BENCH_LOOP_STALLS logs them. */
function loopStalls(from: number, to: number) {
  const file = process.env.BENCH_LOOP_STALLS;
  if (!file || !existsSync(file)) return {};
  const stalls = readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { at: number; ms: number; cpu: number; wait: number })
    .filter((x) => x.at >= from && x.at <= to && x.ms > 50);
  const sum = (k: 'ms' | 'cpu' | 'wait') => stalls.reduce((n, x) => n + x[k], 0);
  return {
    loop_stalls_over_50ms: stalls.length,
    loop_stall_worst: round(Math.max(0, ...stalls.map((x) => x.ms))),
    loop_stall_most_cpu: round(Math.max(0, ...stalls.map((x) => x.cpu))),
    loop_stalls_cpu_pct: stalls.length ? Math.round((100 * sum('cpu')) / sum('ms')) : 0,
    loop_stalls_wait_pct: stalls.length ? Math.round((100 * sum('wait')) / sum('ms')) : 0,
  };
}

async function main() {
  const db = freshDb(store, PG_URL, 'healthz');
  const server = await startServer(db, 'spawn', { port });
  const H = { authorization: `Bearer ${server.key}`, 'content-type': 'application/json' };
  const call = (method: string, path: string, body?: unknown) =>
    fetch(server.url + path, { method, headers: H, body: body === undefined ? undefined : JSON.stringify(body) }).then(async (r) => {
      const t = await r.text();
      return { status: r.status, json: t ? JSON.parse(t) : null };
    });

  // The pinger runs on a thread of its own: this thread reads 190 streams and sends 8 MiB bodies,
  // which would delay its pings and be counted against the server.
  const pinger = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     let samples = [];
     parentPort.on('message', (m) => { if (m === 'take') { parentPort.postMessage(samples); samples = []; } if (m === 'stop') process.exit(0); });
     (async () => { for (;;) { const t = performance.now(); await fetch(workerData + '/healthz').then((r) => r.arrayBuffer()); samples.push(performance.now() - t); await new Promise((r) => setTimeout(r, 5)); } })();`,
    { eval: true, workerData: server.url },
  );
  const takeSamples = () =>
    new Promise<number[]>((resolve) => {
      pinger.once('message', resolve);
      pinger.postMessage('take');
    });
  let since = Date.now();
  const take = async () => {
    const s = await takeSamples();
    since = Date.now();
    return s;
  };
  const report = async (label: string) => {
    const from = since;
    const s = await take();
    console.log(
      JSON.stringify({
        store,
        scenario: label,
        pings: s.length,
        p50: round(pct(s, 50)),
        p99: round(pct(s, 99)),
        max: round(Math.max(...s)),
        ...loopStalls(from, since),
      }),
    );
  };

  try {
    // The baseline: an idle server on this machine as it is now (other processes share its cores).
    await new Promise((r) => setTimeout(r, 300));
    await take();
    await new Promise((r) => setTimeout(r, 5_000));
    await report('idle, 5 s');

    if (only === undefined || only === 'batches') await batches();
    if (only === undefined || only === 'streams') await streams();
    if (only === undefined || only === 'readers') await readers();
  } finally {
    await pinger.terminate();
    await server.stop();
    await db.cleanup();
  }

  async function batches() {
    // (a) four parallel senders of the largest batch body.
    await call('POST', '/v1/agents', { name: 'big', max_backlog: 1_000_000, max_parallel: 0 });
    const perPayload = Math.floor(DEFAULTS.payloadLimitBytes * 0.95);
    const items = Math.floor(BATCH.bodyLimitBytes / (perPayload + 64));
    const bodies = Array.from({ length: 4 }, (_, s) =>
      JSON.stringify({ items: Array.from({ length: items }, (_, i) => ({ message: 'm', payload: 'p'.repeat(perPayload - 10) + s + i })) }),
    );
    await new Promise((r) => setTimeout(r, 300));
    await take();
    const statuses: number[] = [];
    await Promise.all(
      bodies.map(async (b) => {
        for (let rep = 0; rep < 6; rep++) {
          const r = await fetch(server.url + '/v1/agents/big/executions/batch', { method: 'POST', headers: H, body: b });
          await r.arrayBuffer(); // read, not parsed: parsing here would hold this process's loop
          statuses.push(r.status);
        }
      }),
    );
    await report(`4 parallel batch submits of ${(Buffer.byteLength(bodies[0]!) / 2 ** 20).toFixed(1)} MiB (${items} items), 6 each`);
    if (statuses.some((s) => s !== 201 && s !== 200)) console.log('statuses', statuses);
  }

  async function streams() {
    // (b) 190 event streams while tasks are submitted, claimed and completed.
    await call('POST', '/v1/agents', { name: 'busy', max_backlog: 1_000_000, max_parallel: 1000 });
    const open = await Promise.all(
      Array.from({ length: 190 }, async () => {
        const ac = new AbortController();
        const r = await fetch(server.url + '/v1/events', { headers: { authorization: H.authorization }, signal: ac.signal });
        const reader = r.body!.getReader();
        let bytes = 0;
        void (async () => {
          try {
            for (;;) {
              const { done, value } = await reader.read();
              if (done) break;
              bytes += value.length;
            }
          } catch {
            // aborted at the end
          }
        })();
        return { ac, bytes: () => bytes };
      }),
    );
    await new Promise((r) => setTimeout(r, 300));
    await take();
    const until = Date.now() + 10_000;
    let done = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (Date.now() < until) {
          await call('POST', '/v1/agents/busy/executions/batch', { items: Array.from({ length: 200 }, (_, i) => ({ message: `t${i}` })) });
          const c = await call('POST', '/v1/agents/busy/claim', { max: 100 });
          for (const t of c.json.tasks as Array<{ execution_id: string; lease_token: string }>) {
            await call('POST', `/v1/executions/${t.execution_id}/complete`, {
              lease_token: t.lease_token,
              status: 'succeeded',
              result: 'ok',
            });
            done++;
          }
        }
      }),
    );
    await report(`190 event streams, 4 clients submitting (batches of 200), claiming and completing: ${done} completed in 10 s`);
    const received = open.reduce((n, s) => n + s.bytes(), 0);
    console.log(JSON.stringify({ stream_bytes_received: received }));
    for (const s of open) s.ac.abort();
  }

  async function readers() {
    // (c) 150 connections asking for large answers and never reading them.
    await call('POST', '/v1/agents', { name: 'talker' });
    const id = (await call('POST', '/v1/agents/talker/executions', { message: 'talk a lot' })).json.execution_id as string;
    const [task] = (await call('POST', '/v1/agents/talker/claim', {})).json.tasks as Array<{ lease_token: string }>;
    const line = (i: number) => `${i} `.padEnd(16_000, 'abcdefghij');
    for (let part = 0; part < 2; part++)
      await call('POST', `/v1/executions/${id}/logs`, {
        lease_token: task!.lease_token,
        lines: Array.from({ length: 165 }, (_, i) => ({ line: line(part * 165 + i) })),
      });
    await call('POST', `/v1/executions/${id}/complete`, {
      lease_token: task!.lease_token,
      status: 'succeeded',
      result: { text: 'r'.repeat(4_000_000) },
    });
    const answered = async () =>
      Number(/^baton_http_sliced_answers_total (\S+)$/m.exec(await (await fetch(server.url + '/metrics')).text())?.[1] ?? 0);
    const before = await answered();
    await new Promise((r) => setTimeout(r, 300));
    await take();
    const { hostname, port: p } = new URL(server.url);
    const sockets: Socket[] = Array.from({ length: 150 }, (_, i) => {
      const s = connect({ host: hostname, port: Number(p) }, () => {
        s.pause();
        const path = i % 2 ? `/v1/executions/${id}` : `/v1/executions/${id}/logs?limit=5000`;
        s.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: ${H.authorization}\r\n\r\n`);
      });
      s.on('error', () => undefined);
      return s;
    });
    const t = performance.now();
    while ((await answered()) < before + 150) await new Promise((r) => setTimeout(r, 100));
    const took = performance.now() - t;
    await report(
      `150 connections asking for a 5 MiB log page or a 4 MB execution, not reading: all answered in ${(took / 1000).toFixed(1)} s`,
    );
    for (const s of sockets) s.destroy();
  }
}

await main();
