/**
 * GET /v1/events: Server-Sent Events of execution status changes, over a real socket.
 */
import { ServerResponse } from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openEventStreams } from '../../src/api/routes/events.ts';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { readSse, type SseEvent } from '../../src/sse.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let node: BatonNode;
let admin: string;

beforeAll(async () => {
  ts = await openTestStore({ poolMax: 3 });
  node = await startNode({
    env: ts.nodeEnv,
    logger: false,
    reaper: false,
    nodeId: 'events-test',
  });
  admin = node.createdAdminKey!;
  await node.engine.agents.create({ name: 'ev-a' }, 'test');
  await node.engine.agents.create({ name: 'ev-b' }, 'test');
});
afterAll(async () => {
  await node?.stop();
  await ts?.cleanup();
});

/** Open the stream; `events` collects parsed `execution` events until `close()`. */
async function open(query: string, headers: Record<string, string> = {}) {
  const ctl = new AbortController();
  const res = await fetch(`${node.url}/v1/events${query}`, { headers, signal: ctl.signal });
  const events: Array<{ id: string; agent: string; status: string }> = [];
  const waiters = new Set<() => void>();
  let reading: Promise<void> | undefined;
  if (res.ok) {
    reading = (async () => {
      try {
        for await (const ev of readSse(res.body!) as AsyncGenerator<SseEvent>) {
          if (ev.event === 'execution') events.push(JSON.parse(ev.data));
          for (const w of waiters) w();
        }
      } catch {
        /* aborted */
      }
    })();
  }
  return {
    res,
    events,
    /** Resolves once an event matching `match` arrived (fails the test after 10 s). */
    until(match: (e: { id: string; agent: string; status: string }) => boolean) {
      return new Promise<void>((resolve, reject) => {
        const check = () => {
          if (events.some(match)) {
            waiters.delete(check);
            clearTimeout(timer);
            resolve();
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no matching event; got ${JSON.stringify(events)}`));
        }, 10_000);
        waiters.add(check);
        check();
      });
    },
    async close() {
      ctl.abort();
      await reading;
    },
  };
}

describe('GET /v1/events', () => {
  it('streams every status change of an execution, as text/event-stream', async () => {
    const s = await open('', { authorization: `Bearer ${admin}` });
    expect(s.res.status).toBe(200);
    expect(s.res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const row = await node.engine.submit('ev-a', { message: 'x' }, 'test');
    const [claimed] = await node.engine.claim('ev-a', { owner: 'w' });
    await node.engine.complete(row.id, claimed!.lease_token!, { status: 'succeeded' }, 'test');
    await s.until((e) => e.id === row.id && e.status === 'succeeded');
    expect(s.events.filter((e) => e.id === row.id).map((e) => e.status)).toEqual(['queued', 'running', 'succeeded']);
    // The documented fields and no others (the engine's own event also carried `local`).
    expect(s.events.find((e) => e.id === row.id)).toEqual({ id: row.id, agent: 'ev-a', status: 'queued', at: expect.any(String) });
    await s.close();
  });

  it('documents both streams as 200 text/event-stream in /openapi.json (the logs page stays JSON)', async () => {
    const spec = await (await fetch(`${node.url}/openapi.json`)).json();
    const events = spec.paths['/v1/events'].get.responses['200'];
    expect(Object.keys(events.content)).toEqual(['text/event-stream']);
    expect(events.description).toContain('event: execution');
    const logs = spec.paths['/v1/executions/{id}/logs'].get.responses['200'];
    expect(Object.keys(logs.content)).toEqual(['application/json', 'text/event-stream']);
    expect(logs.content['application/json'].schema.properties).toHaveProperty('lines');
    expect(logs.description).toContain('follow=true');
  });

  it('answers HEAD with the headers and ends it, on the events and the log-follow streams', async () => {
    // (Fastify serves HEAD with the GET handler: it used to hold the connection open like a stream.)
    const row = await node.engine.submit('ev-a', { message: 'head' }, 'test');
    const { port } = new URL(node.url);
    for (const path of ['/v1/events', `/v1/executions/${row.id}/logs?follow=true`]) {
      // A second request on the same connection is answered only once the HEAD's answer has ended.
      const socket = net.connect(Number(port), '127.0.0.1');
      let got = '';
      const answered = new Promise<boolean>((r) => {
        socket.on('data', (d) => {
          got += d.toString();
          if (got.includes('{"status":"ok"}')) r(true);
        });
        setTimeout(() => r(false), 5_000);
      });
      socket.write(`HEAD ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${admin}\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n`);
      expect(await answered, `${path}: the HEAD answer ended: ${JSON.stringify(got)}`).toBe(true);
      socket.destroy();
      expect(got).toMatch(/^HTTP\/1\.1 200 [^]*content-type: text\/event-stream[^]*HTTP\/1\.1 200 /i);
    }
    await node.engine.cancel(row.id, 'test');
  });

  it('filters by agent, and accepts the key as ?key= (EventSource cannot send headers)', async () => {
    const s = await open(`?agent=ev-b&key=${admin}`);
    expect(s.res.status).toBe(200);
    const a = await node.engine.submit('ev-a', { message: 'a' }, 'test');
    const b = await node.engine.submit('ev-b', { message: 'b' }, 'test');
    await s.until((e) => e.id === b.id);
    expect(s.events.some((e) => e.id === a.id)).toBe(false);
    await s.close();
    await node.engine.cancel(a.id, 'test');
    await node.engine.cancel(b.id, 'test');
  });

  it("an agent-scoped key sees only its own agent, and is refused another agent's changes", async () => {
    const { key } = await node.keys.create({ name: 'scoped-ev', scope: 'agent', agent: 'ev-a' }, 'test');
    const refused = await fetch(`${node.url}/v1/events?agent=ev-b`, { headers: { authorization: `Bearer ${key}` } });
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject({ error: 'forbidden' });
    const s = await open('', { authorization: `Bearer ${key}` });
    expect(s.res.status).toBe(200);
    const b = await node.engine.submit('ev-b', { message: 'b' }, 'test');
    const a = await node.engine.submit('ev-a', { message: 'a' }, 'test');
    await s.until((e) => e.id === a.id);
    expect(s.events.some((e) => e.id === b.id)).toBe(false);
    await s.close();
    await node.engine.cancel(a.id, 'test');
    await node.engine.cancel(b.id, 'test');
  });

  it('refuses a missing or wrong key, and ?key= anywhere but the SSE routes', async () => {
    expect((await fetch(`${node.url}/v1/events`)).status).toBe(401);
    expect((await fetch(`${node.url}/v1/events?key=bt_nope`)).status).toBe(401);
    const other = await fetch(`${node.url}/v1/agents?key=${admin}`);
    expect(other.status).toBe(401);
    // On the logs route only when it streams (follow=true), and never for writes.
    const row = await node.engine.submit('ev-a', { message: 'k' }, 'test');
    expect((await fetch(`${node.url}/v1/executions/${row.id}/logs?key=${admin}`)).status).toBe(401);
    const post = await fetch(`${node.url}/v1/executions/${row.id}/logs?key=${admin}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ lease_token: 'x', lines: [{ line: 'x' }] }),
    });
    expect(post.status).toBe(401);
    await node.engine.cancel(row.id, 'test');
    const follow = await fetch(`${node.url}/v1/executions/${row.id}/logs?follow=true&key=${admin}`);
    expect(follow.status).toBe(200);
    expect(await follow.text()).toContain('event: end'); // cancelled: the stream ends at once
    const bad = await fetch(`${node.url}/v1/events?agent=Not_An_Agent`, { headers: { authorization: `Bearer ${admin}` } });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { message: string }).message).toMatch(/agent/);
  });

  it('sends a burst of changes to each stream in a few writes, filtered and in the order they happened', async () => {
    // One write per stream per change would hold the event loop for every change times every stream.
    const headers = { authorization: `Bearer ${admin}` };
    const all = await open('', headers);
    const onlyB = await open('?agent=ev-b', headers);
    const happened: string[] = [];
    const record = (e: { id: string }) => happened.push(e.id);
    node.engine.events.on('execution:changed', record);
    const writes = new Map<string, number>();
    const write = ServerResponse.prototype.write;
    ServerResponse.prototype.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
      const url = this.req?.url ?? '';
      if (url.startsWith('/v1/events') && String(chunk).includes('event: execution')) writes.set(url, (writes.get(url) ?? 0) + 1);
      return (write as (...a: unknown[]) => boolean).call(this, chunk, ...rest);
    } as typeof write;
    const ids: Record<string, string[]> = {};
    try {
      for (const agent of ['ev-a', 'ev-b']) {
        const res = await fetch(`${node.url}/v1/agents/${agent}/executions/batch`, {
          method: 'POST',
          headers: { ...headers, 'content-type': 'application/json' },
          body: JSON.stringify({ items: Array.from({ length: 80 }, (_, i) => ({ message: `burst ${i}` })) }),
        });
        expect(res.status).toBe(200);
        ids[agent] = ((await res.json()) as { items: Array<{ execution_id: string }> }).items.map((i) => i.execution_id);
      }
      const last = ids['ev-b']!.at(-1)!;
      await all.until((e) => e.id === last);
      await onlyB.until((e) => e.id === last);
    } finally {
      ServerResponse.prototype.write = write;
      node.engine.events.off('execution:changed', record);
    }
    const burst = new Set([...ids['ev-a']!, ...ids['ev-b']!]);
    const inBurst = (e: { id: string }) => burst.has(e.id);
    expect(all.events.filter(inBurst).map((e) => e.id)).toEqual(happened.filter((id) => burst.has(id)));
    expect(onlyB.events.filter(inBurst).map((e) => e.id)).toEqual(happened.filter((id) => ids['ev-b']!.includes(id)));
    expect(onlyB.events.every((e) => e.agent === 'ev-b')).toBe(true);
    expect(writes.get('/v1/events'), '160 changes, writes to the unfiltered stream').toBeLessThan(16);
    expect(writes.get('/v1/events?agent=ev-b'), '80 changes, writes to the filtered stream').toBeLessThan(8);
    await all.close();
    await onlyB.close();
    for (const id of burst) await node.engine.cancel(id, 'test');
  });

  it('fans a change out to many streams a slice a turn, so requests are answered in between; each gets it', async () => {
    const headers = { authorization: `Bearer ${admin}` };
    const before = openEventStreams(node.engine);
    const streams = await Promise.all(Array.from({ length: 70 }, () => open('', headers)));
    // A turn counter: it moves on once per pass of the event loop's check phase.
    let turn = 0;
    let counting = true;
    const tick = () => {
      turn++;
      if (counting) setImmediate(tick);
    };
    setImmediate(tick);
    const turns: number[] = [];
    const write = ServerResponse.prototype.write;
    ServerResponse.prototype.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
      if ((this.req?.url ?? '').startsWith('/v1/events') && String(chunk).includes('event: execution')) turns.push(turn);
      return (write as (...a: unknown[]) => boolean).call(this, chunk, ...rest);
    } as typeof write;
    let row: { id: string };
    try {
      row = await node.engine.submit('ev-a', { message: 'to every stream' }, 'test');
      await Promise.all(streams.map((s) => s.until((e) => e.id === row.id)));
    } finally {
      ServerResponse.prototype.write = write;
      counting = false;
    }
    expect(turns).toHaveLength(70); // one write per stream
    expect(new Set(turns).size, 'turns the fan-out took').toBeGreaterThanOrEqual(3); // 70 streams, 32 a turn
    for (const s of streams) await s.close();
    await expect.poll(() => openEventStreams(node.engine), { timeout: 10_000 }).toBe(before);
    await node.engine.cancel(row!.id, 'test');
  });

  it('forgets a stream when its client disconnects', async () => {
    const before = openEventStreams(node.engine);
    const streams = await Promise.all([1, 2, 3].map(() => open('', { authorization: `Bearer ${admin}` })));
    expect(openEventStreams(node.engine)).toBe(before + 3);
    for (const s of streams) await s.close();
    await expect.poll(() => openEventStreams(node.engine), { timeout: 10_000 }).toBe(before);
  });

  it('a stream that is still open does not hold up shutdown', async () => {
    const ts2 = await openTestStore({ poolMax: 2 });
    const other = await startNode({
      env: ts2.nodeEnv,
      logger: false,
      reaper: false,
      nodeId: 'events-test-2',
    });
    const res = await fetch(`${other.url}/v1/events`, { headers: { authorization: `Bearer ${other.createdAdminKey}` } });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    await reader.read(); // the opening comment
    await other.stop(); // would hang forever if open streams were not ended
    // The rest of the opening lines, then the end — within a bound, so a stream left open fails
    // here instead of hanging the test.
    const ended = await Promise.race([
      (async () => {
        for (let rest = await reader.read(); !rest.done; rest = await reader.read());
        return 'ended';
      })(),
      new Promise<string>((r) => setTimeout(() => r('still open after 10 s'), 10_000)),
    ]);
    expect(ended).toBe('ended');
    await ts2.cleanup();
  });
});
