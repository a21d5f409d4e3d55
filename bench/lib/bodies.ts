/**
 * The largest bodies each route takes, in the shape that costs the most to handle (an object of
 * many small keys: JSON parsing, validation, redaction and serialising all walk every key), sent
 * to a `baton up` of its own (a spawned process, so this process's own work does not count) while
 * a loop here asks GET /healthz one request after another. The figure per body is the worst
 * /healthz latency while that body was handled: how long one client's large request holds
 * everybody else's. The standard: no synchronous step over ~50 ms, so /healthz stays ≤ 100 ms.
 */
import { BATCH } from '../../src/domain/batch.ts';
import { GROUP_LIMITS } from '../../src/domain/groups.ts';
import { DEFAULTS } from '../../src/config.ts';
import { MAX_JSON_VALUES } from '../../src/domain/json.ts';
import type { StoreKind } from '../../src/store/adapter.ts';
import { startServer } from './server.ts';
import { freshDb } from './stores.ts';

export interface BodyProbe {
  body: string;
  mib: number;
  status: number;
  /** Worst /healthz latency during each repetition, ms. */
  worst_healthz_ms: number[];
}

export interface BodiesResult {
  probes: BodyProbe[];
  target_ms: number;
}

export const BODIES_TARGET_MS = 100;

/** A JSON object of `k0: 0, k1: 1, …` holding `values` values (keys and numbers). */
function wideOfValues(values: number): Record<string, number> {
  const o: Record<string, number> = {};
  for (let i = 0; i < values / 2; i++) o[`k${i}`] = i;
  return o;
}

/** A JSON object of `k0: 0, k1: 1, …` that serialises to about `bytes` bytes. */
export function wideObject(bytes: number): Record<string, number> {
  const o: Record<string, number> = {};
  let size = 2;
  for (let i = 0; size < bytes; i++) {
    o[`k${i}`] = i;
    size += String(i).length * 2 + 5;
  }
  return o;
}

export async function runBodiesBench(store: StoreKind, pgUrl: string, reps = 3): Promise<BodiesResult> {
  const db = freshDb(store, pgUrl, 'bodies');
  const server = await startServer(db, 'spawn');
  // The accept header is the MCP endpoint's; the API ignores it.
  const H = { authorization: `Bearer ${server.key}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
  const call = async (method: string, path: string, body?: string) => {
    const r = await fetch(server.url + path, { method, headers: H, body });
    const text = await r.text();
    return { status: r.status, json: text ? JSON.parse(text) : null };
  };
  const probes: BodyProbe[] = [];
  try {
    await call('POST', '/v1/agents', JSON.stringify({ name: 'big', max_backlog: 100_000, max_parallel: 1000 }));

    let worst = 0;
    let pinging = true;
    const pinger = (async () => {
      while (pinging) {
        const t = performance.now();
        await fetch(`${server.url}/healthz`).then((r) => r.arrayBuffer());
        worst = Math.max(worst, performance.now() - t);
        await new Promise((r) => setTimeout(r, 2));
      }
    })();

    const probe = async (label: string, path: () => Promise<string>, body: (i: number) => Promise<string> | string) => {
      const p: BodyProbe = { body: label, mib: 0, status: 0, worst_healthz_ms: [] };
      for (let i = 0; i < reps; i++) {
        const to = await path();
        const b = await body(i);
        p.mib = Math.round((Buffer.byteLength(b) / 1024 / 1024) * 100) / 100;
        await new Promise((r) => setTimeout(r, 50));
        worst = 0;
        // The answer is read, not parsed: parsing a large one here would hold this process's
        // event loop, and with it the /healthz loop that measures the server.
        p.status = await fetch(server.url + to, { method: 'POST', headers: H, body: b }).then(async (r) => {
          await r.arrayBuffer();
          return r.status;
        });
        await new Promise((r) => setTimeout(r, 50));
        p.worst_healthz_ms.push(Math.round(worst * 10) / 10);
      }
      probes.push(p);
    };
    const fixed = (path: string) => () => Promise.resolve(path);
    // A claimed task of its own for each completion; its lease token goes in the body.
    let token = '';
    const claimed = async () => {
      await call('POST', '/v1/agents/big/executions', JSON.stringify({ message: 'to complete' }));
      const c = await call('POST', '/v1/agents/big/claim', JSON.stringify({ max: 1 }));
      const t = c.json.tasks[0];
      token = t.lease_token;
      return `/v1/executions/${t.execution_id}/complete`;
    };

    // Wide bodies are cut to just under the values one body may hold (MAX_JSON_VALUES; a key and its
    // number are two); string bodies go to the byte limit.
    const budget = MAX_JSON_VALUES - 1000;
    const items = Math.min(BATCH.maxItems, GROUP_LIMITS.maxSize);
    const perItem = wideOfValues(Math.floor(budget / items) - 8);
    await probe(`batch: ${items} items, wide payloads (${MAX_JSON_VALUES / 1000}k values)`, fixed('/v1/agents/big/executions/batch'), () =>
      JSON.stringify({ items: Array.from({ length: items }, () => ({ message: 'm', payload: perItem })) }),
    );
    // The same values as payloads of small objects whose keys all differ (the costliest to parse).
    let batchKey = 0;
    const distinctPayload = () =>
      Array.from({ length: Math.floor((budget / items - 12) / 17) }, () => {
        const o: Record<string, number> = {};
        for (let k = 0; k < 8; k++) o[`k${batchKey++}`] = k;
        return o;
      });
    await probe(`batch: ${items} items, payloads of small objects, every key distinct`, fixed('/v1/agents/big/executions/batch'), () =>
      JSON.stringify({ items: Array.from({ length: items }, () => ({ message: 'm', payload: distinctPayload() })) }),
    );
    const perPayload = Math.floor(DEFAULTS.payloadLimitBytes * 0.95);
    const stringItems = Math.floor(BATCH.bodyLimitBytes / (perPayload + 64));
    await probe(
      `batch: ${stringItems} items, ${Math.round(perPayload / 1024)} KiB string payload each`,
      fixed('/v1/agents/big/executions/batch'),
      () =>
        JSON.stringify({
          items: Array.from({ length: stringItems }, (_, i) => ({ message: 'm', payload: 'p'.repeat(perPayload - 10) + i })),
        }),
    );
    await probe(`group: ${items} members, wide payloads (${MAX_JSON_VALUES / 1000}k values)`, fixed('/v1/groups'), () =>
      JSON.stringify({ members: Array.from({ length: items }, () => ({ agent: 'big', message: 'm', payload: perItem })) }),
    );
    await probe(`submit: ${Math.round(perPayload / 1024)} KiB wide payload`, fixed('/v1/agents/big/executions'), () =>
      JSON.stringify({ message: 'm', payload: wideObject(perPayload) }),
    );
    const atCap = wideOfValues(budget);
    await probe(`complete: wide result (${MAX_JSON_VALUES / 1000}k values)`, claimed, () =>
      JSON.stringify({ lease_token: token, status: 'succeeded', result: atCap }),
    );
    // The shape V8 parses slowest per value: small objects whose keys all differ (each object a
    // new hidden class), 8 keys each, to the values bound (17 values an object, counted as jsonShape does).
    let key = 0;
    const distinct = Array.from({ length: Math.floor(budget / 17) }, () => {
      const o: Record<string, number> = {};
      for (let k = 0; k < 8; k++) o[`k${key++}`] = k;
      return o;
    });
    await probe(`complete: result of ${distinct.length.toLocaleString('en-US')} small objects, every key distinct`, claimed, () =>
      JSON.stringify({ lease_token: token, status: 'succeeded', result: distinct }),
    );
    await probe('complete: ~4 MiB string result', claimed, () =>
      JSON.stringify({ lease_token: token, status: 'succeeded', result: 'r'.repeat(4 * 1024 * 1024 - 64 * 1024) }),
    );
    const overCap = wideObject(4 * 1024 * 1024 - 64 * 1024);
    await probe('complete: ~4 MiB wide result (over the values bound: 413)', claimed, () =>
      JSON.stringify({ lease_token: token, status: 'succeeded', result: overCap }),
    );
    // Routes that read the whole body (no values handed to the JSON thread): about 1 MiB of small
    // objects whose keys all differ, new names each repetition (the server's parser would reuse the
    // hidden classes of names it has seen). Counted on the JSON thread first: refused, 413.
    const distinctMiB = (rep: number, bytes: number) => {
      const out: Array<Record<string, number>> = [];
      for (let size = 0, n = 0; size < bytes; n++) {
        const o: Record<string, number> = {};
        for (let k = 0; k < 8; k++) o[`r${rep}_${n}_${k}`] = k;
        out.push(o);
        size += 8 * (String(n).length + String(rep).length + 10) + 2;
      }
      return out;
    };
    await probe('agent create: ~1 MiB of small objects, every key distinct (413 past 10,000 shapes)', fixed('/v1/agents'), (i) =>
      JSON.stringify({ name: `shapes-${i}`, description: 'd', extra: distinctMiB(i, 1000 * 1024) }),
    );
    await probe('MCP run_task: ~1 MiB payload of small objects, every key distinct (413 past 10,000 shapes)', fixed('/mcp'), (i) =>
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'run_task', arguments: { agent: 'big', message: 'm', payload: distinctMiB(i + 10, 1000 * 1024) } },
      }),
    );
    // A route that reads it all, with a large body of alike objects: measured there, then parsed here.
    await probe(
      'logs: 1,000 lines of ~4 KiB (alike objects, accepted)',
      async () => (await claimed()).replace(/complete$/, 'logs'),
      () =>
        JSON.stringify({
          lease_token: token,
          lines: Array.from({ length: 1_000 }, (_, i) => ({ stream: 'stdout', line: `${i} `.padEnd(4000, 'l') })),
        }),
    );
    // The largest answer: a claim of max 100 with 100 queued tasks whose payloads are at the limit
    // (small keys); the answer stops at DEFAULTS.claimAnswerBytes (8 of them).
    await call('POST', '/v1/agents', JSON.stringify({ name: 'claims', max_backlog: 100_000, max_parallel: 1000 }));
    const claimPayload = JSON.stringify({ message: 'm', payload: wideObject(perPayload) });
    await probe(
      `claim: max 100 of 100 queued, ${Math.round(perPayload / 1024)} KiB payloads of small keys (answer ≤ ${DEFAULTS.claimAnswerBytes / 1024 / 1024} MiB)`,
      async () => {
        for (let i = 0; i < 100; i++) await call('POST', '/v1/agents/claims/executions', claimPayload);
        return '/v1/agents/claims/claim';
      },
      () => JSON.stringify({ max: 100 }),
    );
    pinging = false;
    await pinger;
  } finally {
    await server.stop();
    await db.cleanup();
  }
  return { probes, target_ms: BODIES_TARGET_MS };
}
