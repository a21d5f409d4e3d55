/**
 * A completion's long result, from the API or a push agent's answer, is checked and serialised on
 * a worker thread, never parsed on the event loop (src/engine/json-thread.ts): stored as
 * JSON.stringify writes it, secrets redacted, refused as a short one would be when it is not JSON
 * or holds a prototype key, and the body's other members still parsed and validated. Real
 * `baton up` on each store, real sockets.
 */
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import type { BatonClient } from '../../src/client.ts';
import { interpretAnswer } from '../../src/delivery/dispatcher.ts';
import { LARGE_JSON_CHARS, largeMembers, membersOf, RAW_MEMBER_MIN_CHARS, RawJson, spansAt } from '../../src/domain/json.ts';
import { jsonShapesOffThread, OffThreadJsonError } from '../../src/engine/json-thread.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { testNodeHooks } from '../helpers/delivery.ts';
import { STORE_KIND } from '../helpers/store.ts';
import { countTurns } from '../helpers/turns.ts';

let node: BatonNode;
let api: BatonClient;
let key: string;

testNodeHooks((t) => ({ node, api, key } = t));
beforeAll(async () => {
  await api.createAgent({ name: 'big', max_parallel: 10 });
});

/** A raw POST of `body` with the admin key; the answer parsed. */
async function post(path: string, body: string, headers: Record<string, string> = {}) {
  const r = await fetch(node.url + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body,
  });
  return { status: r.status, body: (await r.json()) as Record<string, any> };
}

/** A claimed task of its own, and a raw POST of `body` to its completion. */
async function claimed() {
  await api.submit('big', { message: 'm' });
  const [task] = await api.claim('big', { worker_id: 'w', wait_seconds: 1 });
  const complete = async (body: string) => {
    const r = await fetch(`${node.url}/v1/executions/${task!.execution_id}/complete`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body,
    });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };
  return { id: task!.execution_id, token: task!.lease_token, complete };
}

/**
 * `fn()`, and how many times JSON.parse was called meanwhile on this thread (where the server
 * runs) with a text that `match`es: what the server's event loop parsed while it answered.
 */
async function parsedHere<T>(match: (text: string) => boolean, fn: () => Promise<T>): Promise<{ value: T; parsed: number[] }> {
  const parse = JSON.parse;
  const parsed: number[] = [];
  JSON.parse = ((text: string, reviver?: Parameters<typeof parse>[1]) => {
    if (typeof text === 'string' && match(text)) parsed.push(text.length);
    return parse(text, reviver);
  }) as typeof JSON.parse;
  try {
    return { value: await fn(), parsed };
  } finally {
    JSON.parse = parse;
  }
}
const isLong = (text: string) => text.length >= RAW_MEMBER_MIN_CHARS;
const holdsKey0 = (text: string) => text.includes('"key0"');

/** Small objects whose keys all differ (the shape V8 parses slowest), `n` of them. */
function distinctKeys(n: number): Array<Record<string, number>> {
  let k = 0;
  return Array.from({ length: n }, () => Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`key${k++}`, i])));
}

describe(`a completion's long result (${STORE_KIND})`, () => {
  it('is stored as JSON.stringify writes it, whatever the spacing sent, and read back whole', async () => {
    const result = { files: distinctKeys(14_000), note: 'ünïcödé \u2028 "quoted" \\ back' };
    const t = await claimed();
    // Sent indented (over 1 MiB of text), stored without the spaces.
    const body = JSON.stringify({ lease_token: t.token, status: 'succeeded', result }, null, 1);
    expect(body.length).toBeGreaterThan(1024 * 1024);
    // The server runs in this process: nothing long is parsed on its thread while it completes.
    const { value: answer, parsed } = await parsedHere(isLong, async () => {
      const r = await fetch(`${node.url}/v1/executions/${t.id}/complete`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body,
      });
      return { status: r.status, text: await r.text() };
    });
    expect(parsed).toEqual([]);
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.text).result).toEqual(result);
    const read = await fetch(`${node.url}/v1/executions/${t.id}`, { headers: { authorization: `Bearer ${key}` } });
    const text = await read.text();
    expect(text).toContain(`"result":${JSON.stringify(result)}`);
    expect((await api.getExecution(t.id)).status).toBe('succeeded');
  });

  it('has its secrets redacted, written plainly or escaped', async () => {
    const t = await claimed();
    const token = 'ghp_' + 'a'.repeat(36);
    const escaped = JSON.stringify(token).replace('p_', '\\u0070_'); // "gh\u0070_aaa…": a secret once parsed
    const big = JSON.stringify(distinctKeys(5_000));
    const body = `{"lease_token":"${t.token}","status":"succeeded","result":{"rows":${big},"plain":"${token}","hidden":${escaped}}}`;
    expect(body.length).toBeGreaterThan(256 * 1024);
    expect((await t.complete(body)).status).toBe(200);
    const stored = (await api.getExecution(t.id)).result as Record<string, unknown>;
    expect(stored.plain).toBe('ghp_[redacted]');
    expect(stored.hidden).toBe('ghp_[redacted]');
    expect(stored.rows).toEqual(JSON.parse(big));
  });

  it('is refused when it is not JSON or holds a prototype key, as a short one is, and the lease is kept', async () => {
    const t = await claimed();
    const big = JSON.stringify(distinctKeys(5_000));
    const broken = await t.complete(`{"lease_token":"${t.token}","status":"succeeded","result":[${big.slice(1, -1)},]}`);
    expect(broken.status).toBe(400);
    expect(broken.body.error).toBe('invalid_json');
    expect(broken.body.message).toMatch(/^body\.result: /);
    const short = await t.complete(`{"lease_token":"${t.token}","status":"succeeded","result":{"__proto__":{"x":1}}}`);
    const long = await t.complete(`{"lease_token":"${t.token}","status":"succeeded","result":{"rows":${big},"__proto__":{"x":1}}}`);
    expect(short.status).toBe(400);
    expect(long.status).toBe(400);
    expect(long.body.message).toMatch(/prototype/);
    expect((await api.getExecution(t.id)).status).toBe('running');
    // A good report then lands.
    expect((await t.complete(JSON.stringify({ lease_token: t.token, status: 'succeeded', result: JSON.parse(big) }))).status).toBe(200);
  });

  it('is written off the event loop: the loop keeps turning while its transaction runs, and what follows still commits', async () => {
    const t = await claimed();
    const counter = countTurns();
    const text = 'z'.repeat(2 * 1024 * 1024);
    try {
      await node.engine.complete(t.id, t.token, { status: 'succeeded', result: { text } }, 'test');
    } finally {
      counter.stop();
    }
    // SQLite runs it on its writer thread, a round trip per statement; PostgreSQL waits on its socket.
    expect(counter.turns).toBeGreaterThanOrEqual(5);
    const done = await api.getExecution(t.id);
    expect(done.status).toBe('succeeded');
    expect((done.result as { text: string }).text).toBe(text);
    expect(done.events!.map((e) => e.to)).toEqual(['queued', 'running', 'succeeded']);
    // The main connection and its group commits go on as before.
    const next = await claimed();
    expect((await next.complete(`{"lease_token":"${next.token}","status":"succeeded","result":1}`)).status).toBe(200);
  });

  it('leaves the rest of the body to the route, and bounds it: many values anywhere else are refused (413)', async () => {
    const t = await claimed();
    const big = JSON.stringify(distinctKeys(5_000)); // 85,000 values
    for (const body of [
      `{"lease_token":"${t.token}","status":"succeeded","usage":{"input_tokens":1,"rows":${big}}}`,
      `{"lease_token":"${t.token}","status":"succeeded","result":1,"extra":${big}}`,
    ]) {
      const r = await t.complete(body);
      expect(r.status).toBe(413);
      expect(r.body).toMatchObject({
        error: 'payload_too_large',
        message: expect.stringMatching(/^body: about [\d,]+ JSON values besides body\.result, more than the 50,000/),
      });
    }
    // The short members are still validated as usual.
    const status = await t.complete(`{"lease_token":"${t.token}","status":"finished","result":${big}}`);
    expect(status.status).toBe(400);
    expect(status.body.message).toMatch(/^body\.status/);
    expect((await api.getExecution(t.id)).status).toBe('running');
    // A later duplicate of the key wins, as JSON.parse has it.
    expect((await t.complete(`{"lease_token":"${t.token}","status":"succeeded","result":${big},"result":"last"}`)).status).toBe(200);
    expect((await api.getExecution(t.id)).result).toBe('last');
  });
});

describe(`a large batch's and group's payloads (${STORE_KIND})`, () => {
  it('are checked and serialised off the event loop, stored as JSON.stringify writes them, and key like a single submit', async () => {
    await api.createAgent({ name: 'many', max_backlog: 10_000 });
    const payloads: unknown[] = Array.from({ length: 1_000 }, () => distinctKeys(12));
    payloads[7] = { replayed: 'its stored answer is read back, parsed: no "key0" in it' };
    // A key first used by a single submit (a small body, its payload parsed here) replays into the batch item.
    const single = await api.submit('many', { message: 'm', payload: payloads[7] }, { idempotencyKey: 'same-7' });
    const items = payloads.map((payload, i) => ({ message: 'm', payload, ...(i === 7 ? { idempotency_key: 'same-7' } : {}) }));
    const body = JSON.stringify({ items }, null, 1);
    expect(body.length).toBeGreaterThan(1024 * 1024);
    const { value: r, parsed } = await parsedHere(holdsKey0, () => post('/v1/agents/many/executions/batch', body));
    expect(parsed).toEqual([]);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ created: 999, replayed: 1 });
    expect(r.body.items[7]).toMatchObject({ execution_id: single.execution_id, replayed: true });
    const third = r.body.items[3].execution_id as string;
    expect((await api.getExecution(third)).payload).toEqual(payloads[3]);

    const members = payloads.slice(0, 500).map((payload) => ({ agent: 'many', message: 'g', payload }));
    const group = await post('/v1/groups', JSON.stringify({ members }), { 'idempotency-key': 'g-1' });
    expect(group.status).toBe(201);
    // The same group again, spaced differently: the same body, replayed.
    const again = await post('/v1/groups', JSON.stringify({ members }, null, 2), { 'idempotency-key': 'g-1' });
    expect(again.status).toBe(201);
    expect(again.body.id).toBe(group.body.id);
  });

  it('with a key on every item: answers stored and replayed as text, no payload parsed here either time', async () => {
    await api.createAgent({ name: 'keyed', max_backlog: 10_000 });
    const items = Array.from({ length: 1_000 }, (_, i) => ({ message: 'm', payload: distinctKeys(12), idempotency_key: `k-${i}` }));
    const body = JSON.stringify({ items });
    const first = await parsedHere(holdsKey0, () => post('/v1/agents/keyed/executions/batch', body));
    expect(first.parsed).toEqual([]);
    expect(first.value.body).toMatchObject({ created: 1_000, replayed: 0 });
    const again = await parsedHere(holdsKey0, () => post('/v1/agents/keyed/executions/batch', body));
    expect(again.parsed).toEqual([]);
    expect(again.value.body).toMatchObject({ created: 0, replayed: 1_000 });
    expect(again.value.body.items.map((i: { execution_id: string }) => i.execution_id)).toEqual(
      first.value.body.items.map((i: { execution_id: string }) => i.execution_id),
    );
    // An item's key replays through a single submit as the answer a single submit would have given.
    const single = await post('/v1/agents/keyed/executions', JSON.stringify({ message: 'm', payload: items[5]!.payload }), {
      'idempotency-key': 'k-5',
    });
    expect(single.status).toBe(201);
    expect(single.body).toMatchObject({ execution_id: first.value.body.items[5].execution_id, agent: 'keyed', status: 'queued' });
    expect(single.body.execution.payload).toEqual(items[5]!.payload);
  });

  it("a single submit's payload too, keyed alike however the body is spaced", async () => {
    await api.createAgent({ name: 'single' });
    const payload = distinctKeys(2_000); // 34,000 values, ~200 KiB
    const body = (indent?: number) => JSON.stringify({ message: 'x'.repeat(90_000), payload }, null, indent);
    expect(body().length).toBeGreaterThan(256 * 1024);
    const { value: answer, parsed } = await parsedHere(holdsKey0, async () => {
      const r = await fetch(`${node.url}/v1/agents/single/executions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: body(),
      });
      return { status: r.status, text: await r.text() };
    });
    expect(answer.status).toBe(201);
    expect(parsed).toEqual([]);
    const created = JSON.parse(answer.text) as { execution_id: string; execution: { payload: unknown } };
    expect(created.execution.payload).toEqual(payload);
    expect((await api.getExecution(created.execution_id)).payload).toEqual(payload);
    // With an Idempotency-Key, sent again spaced otherwise: the same body, replayed.
    // Read as text here: parsing the answers in this process would count as the server's parsing.
    const send = (text: string) => async () => {
      const r = await fetch(`${node.url}/v1/agents/single/executions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'idempotency-key': 'one' },
        body: text,
      });
      return { status: r.status, text: await r.text() };
    };
    const first = await parsedHere(holdsKey0, send(body()));
    const again = await parsedHere(holdsKey0, send(body(1)));
    expect([first.parsed, again.parsed]).toEqual([[], []]);
    expect(first.value.status).toBe(201);
    expect(again.value.status).toBe(201);
    // The replay is the first answer, as sent.
    expect(again.value.text).toBe(first.value.text);
    expect(JSON.parse(first.value.text).execution.payload).toEqual(payload);
  });

  it('name the item whose payload is not JSON, and create nothing', async () => {
    await api.createAgent({ name: 'broken', max_backlog: 10_000 });
    const ok = JSON.stringify(distinctKeys(12));
    const items = Array.from({ length: 1_000 }, (_, i) => `{"message":"m","payload":${i === 42 ? '{"a":1,}' : ok}}`);
    const r = await post('/v1/agents/broken/executions/batch', `{"items":[${items.join(',')}]}`);
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ error: 'invalid_json', message: expect.stringMatching(/^body\.items\.42\.payload: /) });
    expect((await api.listExecutions({ agent: 'broken' })).executions).toHaveLength(0);
  });
});

describe(`a large body read as bytes (${STORE_KIND})`, () => {
  it('arrives whole from the chunks it came in: characters split between chunks, bodies long in bytes but short in characters', async () => {
    await api.createAgent({ name: 'wide', max_backlog: 100 });
    // Three-byte characters: a 64 KiB read ends inside one of them.
    const items = [0, 1, 2, 3, 4].map((i) => ({ message: `m€${i}`, payload: { text: '€é'.repeat(40_000) + i } }));
    const wide = await post('/v1/agents/wide/executions/batch', JSON.stringify({ items }));
    expect(wide.status).toBe(200);
    expect(wide.body).toMatchObject({ created: 5 });
    for (const [i, item] of wide.body.items.entries()) {
      const e = await api.getExecution(item.execution_id as string);
      expect(e.payload).toEqual(items[i]!.payload);
      expect(e.message).toBe(items[i]!.message);
    }
    // Over LARGE_JSON_CHARS in bytes, under it in characters: parsed as any small body.
    const short = JSON.stringify({ items: [0, 1].map(() => ({ message: 'm', payload: { text: '€'.repeat(50_000) } })) });
    expect(Buffer.byteLength(short)).toBeGreaterThan(LARGE_JSON_CHARS);
    expect(short.length).toBeLessThan(LARGE_JSON_CHARS);
    const r = await post('/v1/agents/wide/executions/batch', short);
    expect(r.status).toBe(200);
    expect((await api.getExecution(r.body.items[1].execution_id as string)).payload).toEqual({ text: '€'.repeat(50_000) });
  });
});

describe(`a large body a route reads whole (${STORE_KIND})`, () => {
  const tooManyShapes = (where: string) => ({
    error: 'payload_too_large',
    message: expect.stringMatching(new RegExp(`^${where}: [\\d,]+ distinct object shapes \\(orders of keys\\), more than the 10,000`)),
  });

  it('is measured off the event loop first: past 10,000 object shapes it is refused, never parsed here', async () => {
    // Costly to parse (12,000 objects whose keys differ), yet few values: only the shape bound sees it.
    const costly = JSON.stringify(distinctKeys(1_500));
    const agent = `{"name":"shapes","description":"${'d'.repeat(150_000)}","extra":${costly}}`;
    expect(agent.length).toBeGreaterThan(256 * 1024);
    const { value: refused, parsed } = await parsedHere(holdsKey0, () => post('/v1/agents', agent));
    expect(parsed).toEqual([]);
    expect(refused.status).toBe(413);
    expect(refused.body).toMatchObject(tooManyShapes('body'));
    // The MCP endpoint reads its body whole too.
    const call = {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'run_task', arguments: { agent: 'big', message: 'm'.repeat(150_000), payload: JSON.parse(costly) } },
    };
    const mcp = await parsedHere(holdsKey0, () => post('/mcp', JSON.stringify(call), { accept: 'application/json, text/event-stream' }));
    expect(mcp.parsed).toEqual([]);
    expect(mcp.value.status).toBe(413);
    expect(mcp.value.body).toMatchObject(tooManyShapes('body'));
    // Not JSON: 400, found there too.
    const broken = await parsedHere(holdsKey0, () => post('/v1/agents', agent.slice(0, -1) + ',}'));
    expect(broken.parsed).toEqual([]);
    expect(broken.value.status).toBe(400);
    expect(broken.value.body).toMatchObject({ error: 'invalid_json', message: expect.stringMatching(/^body: /) });
    await expect(api.getAgent('shapes')).rejects.toMatchObject({ status: 404 });
  });

  it('is parsed as before when its objects are alike, however large', async () => {
    const t = await (async () => {
      await api.submit('big', { message: 'logs' });
      const [task] = await api.claim('big', { worker_id: 'w', wait_seconds: 1 });
      return task!;
    })();
    const lines = Array.from({ length: 1_000 }, (_, i) => ({ stream: i % 2 ? 'stderr' : 'stdout', line: `line ${i} `.padEnd(300, '.') }));
    const body = JSON.stringify({ lease_token: t.lease_token, lines });
    expect(body.length).toBeGreaterThan(256 * 1024);
    const r = await post(`/v1/executions/${t.execution_id}/logs`, body);
    expect(r.status).toBe(200);
    const page = await api.getLogs(t.execution_id, { limit: 10 });
    expect(page.lines[0]).toMatchObject({ line: lines[0]!.line });
  });

  it('bounds the rest of a body whose long values go to the JSON thread alike', async () => {
    await api.createAgent({ name: 'rest-shapes', max_backlog: 10_000 });
    // Each item's unknown keys differ: 12,000 shapes outside the payloads, under the 50,000 values bound.
    const items = Array.from({ length: 1_000 }, (_, i) =>
      Object.fromEntries([
        ['message', 'm'],
        ['payload', { a: i }],
        ...Array.from({ length: 12 }, (_, j) => [`unknown_member_${i}_${j}`, j]),
      ]),
    );
    const body = JSON.stringify({ items });
    expect(body.length).toBeGreaterThan(256 * 1024);
    const r = await post('/v1/agents/rest-shapes/executions/batch', body);
    expect(r.status).toBe(413);
    expect(r.body).toMatchObject(tooManyShapes('body besides body\\.items\\.\\*\\.payload'));
    expect((await api.listExecutions({ agent: 'rest-shapes' })).executions).toHaveLength(0);
  });
});

describe(`a schedule's and a subscription's long payload (${STORE_KIND})`, () => {
  it('goes back as stored, not parsed on the server thread to be answered', async () => {
    await api.createAgent({ name: 'cron-big' });
    // ~120 KiB of the costly shape: over the length an answer splices in unparsed (64 KiB).
    const big = { rows: distinctKeys(500), more: distinctKeys(500) };
    const text = async (path: string) => {
      const r = await fetch(node.url + path, { headers: { authorization: `Bearer ${key}` } });
      return r.text();
    };
    const s = await api.createSchedule('cron-big', { name: 'big', cron: '0 0 1 1 *', message: 'm', payload: big });
    const read = await parsedHere(holdsKey0, () => text(`/v1/schedules/${s.id}`));
    expect(read.parsed).toEqual([]);
    expect(JSON.parse(read.value).payload).toEqual(big);
    const sub = await api.createSubscription({
      source_agent: 'big',
      target_agent: 'cron-big',
      on: 'succeeded',
      message: 'm',
      payload: big,
    });
    const subRead = await parsedHere(holdsKey0, () => text(`/v1/subscriptions/${sub.id}`));
    expect(subRead.parsed).toEqual([]);
    expect(JSON.parse(subRead.value).payload).toEqual(big);
  });
});

describe('jsonShapesOffThread', () => {
  it('counts the distinct orders of named keys, as hidden classes: alike objects once, array indexes never', async () => {
    expect(await jsonShapesOffThread('[1,"a",null]')).toBe(0);
    expect(await jsonShapesOffThread('{"a":1,"b":2}')).toBe(2);
    expect(await jsonShapesOffThread('[{"a":1,"b":2},{"a":3,"b":4},{"a":5}]')).toBe(2);
    expect(await jsonShapesOffThread('[{"a":1,"b":2},{"b":1,"a":2}]')).toBe(4);
    expect(await jsonShapesOffThread('{"0":1,"17":{"x":{"a":1}},"a":[{"x":2}]}')).toBe(2);
    await expect(jsonShapesOffThread('{"a":1,}')).rejects.toBeInstanceOf(OffThreadJsonError);
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(
          fc.string().filter((k) => !/^(0|[1-9]\d*)$/.test(k)),
          fc.integer(),
        ),
        fc.nat({ max: 50 }),
        async (o, n) => {
          // Any number of copies of one object cost its keys once.
          expect(await jsonShapesOffThread(JSON.stringify(Array.from({ length: n + 1 }, () => o)))).toBe(Object.keys(o).length);
        },
      ),
      { numRuns: 50 },
    );
  });
});

describe("a push answer's long result", () => {
  it('is checked and serialised off this thread, handed on as RawJson; long members nobody reads are never parsed', async () => {
    const rows = distinctKeys(10_000);
    const text = JSON.stringify({ status: 'failed', error: { code: 'x', message: 'm' }, result: { rows }, debug: rows.slice(0, 3_000) });
    const { value: out, parsed } = await parsedHere(isLong, () => interpretAnswer({ status: 200, text }));
    expect(parsed).toEqual([]);
    expect(out).toMatchObject({ status: 'failed', error: { code: 'x', message: 'm' } });
    expect(out.result).toBeInstanceOf(RawJson);
    expect((out.result as RawJson).text).toBe(JSON.stringify({ rows }));
    // An answer that is not an object is the result, whole: off this thread too.
    const list = JSON.stringify(distinctKeys(3_000));
    const whole = await parsedHere(isLong, () => interpretAnswer({ status: 200, text: list }));
    expect(whole.parsed).toEqual([]);
    expect(whole.value).toMatchObject({ status: 'succeeded', result: new RawJson(list) });
    expect(await interpretAnswer({ status: 200, text: list.slice(0, -1) })).toMatchObject({
      status: 'failed',
      error: { code: 'push_invalid_response', message: expect.stringMatching(/^HTTP 200 but the body is not JSON: /) },
    });
    // Short members, many shapes among them: counted there, refused unparsed.
    const members = distinctKeys(3_000).map((o, i) => `"m${i}":${JSON.stringify(o)}`);
    const costly = `{"status":"succeeded",${members.join(',')}}`;
    expect(costly.length).toBeGreaterThan(256 * 1024);
    const refused = await parsedHere(holdsKey0, () => interpretAnswer({ status: 200, text: costly }));
    expect(refused.parsed).toEqual([]);
    expect(refused.value).toMatchObject({
      status: 'failed',
      error: { code: 'push_invalid_response', message: expect.stringMatching(/^HTTP 200 but the body: 27,001 distinct object shapes/) },
    });
    // A short answer is interpreted as before.
    expect(await interpretAnswer({ status: 200, text: '{"result":{"a":1}}' })).toMatchObject({ status: 'succeeded', result: { a: 1 } });
  });
});

describe('spansAt', () => {
  it('finds the values at a path of keys and array wildcards, keys written escaped included, without parsing', () => {
    const text = ' {"items" : [ {"payload":1} , {"p\\u0061yload": [2, "]"] }, {"x":3}, 5 ], "payload": 4 } ';
    expect(spansAt(text, ['items', '*', 'payload']).map((s) => [s.path.join('.'), text.slice(s.start, s.end)])).toEqual([
      ['items.0.payload', '1'],
      ['items.1.payload', '[2, "]"]'],
    ]);
    expect(spansAt(text, ['payload']).map((s) => text.slice(s.start, s.end))).toEqual(['4']);
    expect(spansAt(text, ['items', 'payload'])).toEqual([]);
    expect(spansAt('[1]', ['payload'])).toEqual([]);
    fc.assert(
      fc.property(
        fc.array(fc.record({ message: fc.string(), payload: fc.jsonValue({ maxDepth: 3 }) }, { requiredKeys: ['message'] })),
        fc.constantFrom(undefined, 1, '\t'),
        (items, indent) => {
          const text = JSON.stringify({ items }, null, indent);
          const found = spansAt(text, ['items', '*', 'payload']);
          const expected = items.flatMap((item, i) =>
            'payload' in item ? [[`items.${i}.payload`, JSON.parse(JSON.stringify(item.payload))]] : [],
          );
          expect(found.map((s) => [s.path.join('.'), JSON.parse(text.slice(s.start, s.end))])).toEqual(expected);
        },
      ),
    );
  });
});

describe('spansAt on text that is not JSON', () => {
  it('ends, and gives spans in order inside the text that never overlap', () => {
    const valid = fc
      .array(fc.record({ message: fc.string(), payload: fc.jsonValue({ maxDepth: 3 }) }, { requiredKeys: ['message'] }))
      .map((items) => JSON.stringify({ items }));
    const noise = fc.stringMatching(/^[\s{}[\]",:\\a-z0-9]*$/);
    const text = fc.oneof(
      noise,
      fc.tuple(valid, fc.nat()).map(([t, n]) => t.slice(0, n % (t.length + 1))), // cut short
      fc.tuple(valid, fc.nat(), noise).map(([t, n, x]) => t.slice(0, n % (t.length + 1)) + x + t.slice(n % (t.length + 1))),
    );
    fc.assert(
      fc.property(text, fc.constantFrom(['items', '*', 'payload'], ['payload'], ['*'], ['items', '*']), (t, path) => {
        let at = 0;
        for (const s of spansAt(t, path)) {
          expect(s.start).toBeGreaterThanOrEqual(at);
          expect(s.end).toBeGreaterThan(s.start);
          expect(s.end).toBeLessThanOrEqual(t.length);
          expect(s.path).toHaveLength(path.length);
          at = s.end;
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('membersOf', () => {
  it('reads the named top-level members as JSON.parse would, and only those', () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 3 })), fc.constantFrom(undefined, 2), (object, indent) => {
        const text = JSON.stringify(object, null, indent);
        const parsed = JSON.parse(text) as Record<string, unknown>;
        const keys = Object.keys(parsed).filter((_, i) => i % 2 === 0);
        const expected = Object.fromEntries(keys.map((k) => [k, parsed[k]]));
        expect(membersOf(text, [...keys, 'not there'.repeat(3)])).toEqual(expected);
      }),
    );
  });
});

describe('largeMembers', () => {
  it('finds exactly the top-level members whose values are at least that long, as JSON.parse reads them', () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 3 })),
        fc.constantFrom(undefined, 1, 2, '\t'),
        fc.nat({ max: 40 }),
        (object, indent, min) => {
          const text = JSON.stringify(object, null, indent);
          const parsed = JSON.parse(text) as Record<string, unknown>;
          const all = largeMembers(text, 0);
          // Every member, in order, its span parsing to its value.
          expect(all.map((s) => s.key)).toEqual(Object.keys(parsed));
          for (const s of all) expect(JSON.parse(text.slice(s.start, s.end))).toEqual(parsed[s.key]);
          // With a minimum: exactly those at least that long.
          expect(largeMembers(text, min)).toEqual(all.filter((s) => s.end - s.start >= min));
        },
      ),
    );
    expect(largeMembers('[1,2]', 0)).toEqual([]);
    expect(largeMembers('"text"', 0)).toEqual([]);
    const spaced = ' { "a" : [ 1 , "]}" ] , "b\\"" : null } ';
    expect(largeMembers(spaced, 0).map((s) => [s.key, spaced.slice(s.start, s.end)])).toEqual([
      ['a', '[ 1 , "]}" ]'],
      ['b"', 'null'],
    ]);
  });
});
