/**
 * Fewer round trips over HTTP: the batch submit (per-item answers, backlog partial,
 * per-item idempotency keys shared with the Idempotency-Key header, refusals naming the item and
 * field, limits) and the completion that claims the next tasks (fencing, the cap, a drain of N
 * tasks exactly once), and the SDK worker using both.
 */
import type { FastifyInstance, InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../../src/api/server.ts';
import { KeyStore } from '../../src/auth/keys.ts';
import { BatonClient } from '../../src/client.ts';
import { BATCH } from '../../src/domain/batch.ts';
import { Engine } from '../../src/engine/engine.ts';
import { fingerprint } from '../../src/engine/triggers/idempotency.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { createWorker } from '../../src/worker/sdk.ts';
import { startTestNode, until } from '../helpers/delivery.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { countTurns } from '../helpers/turns.ts';
import { agentMakerOverApi } from '../helpers/agents.ts';

let ts: TestStore;
let engine: Engine;
let app: FastifyInstance;
let admin: string;

interface Answer {
  status: number;
  body: any;
}

async function call(method: InjectOptions['method'], url: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await app.inject({
    method,
    url,
    headers: { authorization: `Bearer ${admin}`, ...headers },
    ...(body === undefined ? {} : { payload: body as any }),
  });
  return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : null };
}
const post = (url: string, body?: unknown, headers?: Record<string, string>) => call('POST', url, body, headers);
const batch = (agent: string, items: unknown[], headers?: Record<string, string>) =>
  post(`/v1/agents/${agent}/executions/batch`, { items }, headers);

const newAgent = agentMakerOverApi((url, body) => post(url, body), 'rt', { max_backlog: 1000 });

const rowsOf = (agent: string) => ts.store.db.selectFrom('executions').selectAll().where('agent', '=', agent).orderBy('id').execute();

function refused(a: Answer, status: number, error: string, message: RegExp): void {
  expect({ status: a.status, error: a.body?.error }).toEqual({ status, error });
  expect(a.body.message).toMatch(message);
}

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'round-trips', claimPollMs: 30_000 });
  const keys = new KeyStore(ts.store);
  app = await buildServer({ engine, keys, logger: false });
  admin = (await keys.create({ name: 'admin', scope: 'admin' }, 'test')).key;
});
afterAll(async () => {
  await app?.close();
  engine?.close();
  await ts?.cleanup();
});

describe(`batch submit (${STORE_KIND})`, () => {
  it('creates every item in one transaction, answers per item in order, and audits the batch once', async () => {
    const agent = await newAgent({ max_parallel: 3 });
    const r = await batch(agent, [
      { message: 'a', payload: { i: 0 } },
      { message: 'b', priority: -5 },
      { message: 'c', delay_seconds: 60 },
    ]);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ agent, agent_paused: false, created: 3, replayed: 0, refused: 0 });
    expect(r.body.items.map((i: any) => [i.index, i.status, i.replayed])).toEqual([
      [0, 'queued', undefined],
      [1, 'queued', undefined],
      [2, 'queued', undefined],
    ]);
    const ids = r.body.items.map((i: any) => i.execution_id);
    expect(new Set(ids).size).toBe(3);
    const rows = await rowsOf(agent);
    expect(rows.map((x) => x.id).sort()).toEqual([...ids].sort());
    const byId = new Map(rows.map((x) => [x.id, x]));
    expect(byId.get(ids[0])).toMatchObject({ message: 'a', payload: JSON.stringify({ i: 0 }), status: 'queued', trigger_kind: 'api' });
    expect(byId.get(ids[1])!.priority).toBe(-5);
    expect(byId.get(ids[2])!.run_after).toBeGreaterThan(byId.get(ids[2])!.created_at);
    // Each row's created event, like a single submit's.
    const events = await ts.store.db
      .selectFrom('execution_events')
      .select(['execution_id', 'to_status'])
      .where('execution_id', 'in', ids)
      .execute();
    expect(events.map((e) => e.to_status)).toEqual(['queued', 'queued', 'queued']);
    const audit = await ts.store.db
      .selectFrom('audit_log')
      .selectAll()
      .where('subject', '=', agent)
      .where('action', 'like', 'execution.%')
      .execute();
    expect(audit).toHaveLength(1);
    expect(audit[0]!.action).toBe('execution.create');
    expect(JSON.parse(audit[0]!.detail!)).toEqual({ trigger: 'api', batch: true, count: 3, ids });
    // The created work is claimable at once.
    const claim = await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0, max: 3 });
    expect(claim.body.tasks.map((t: any) => t.execution_id)).toEqual([ids[1], ids[0]]); // priority first; the delayed one waits
  });

  it('a batch of 1,000 lets the event loop turn while it writes, and nobody sees part of it', async () => {
    const agent = await newAgent();
    // Turns of the event loop and reads of the agent's rows, for as long as the batch runs.
    let running = true;
    const seen: number[] = [];
    const reading = (async () => {
      while (running) {
        seen.push((await rowsOf(agent)).length);
        await new Promise((r) => setImmediate(r)); // a read per turn, never a loop of microtasks
      }
    })();
    const counter = countTurns();
    const out = await engine.submitMany(
      agent,
      Array.from({ length: BATCH.maxItems }, (_, i) => ({ message: `m${i}` })),
      'test',
    );
    running = false;
    counter.stop();
    await reading;
    expect(out.filter((o) => o.kind === 'created')).toHaveLength(BATCH.maxItems);
    // SQLite writes on the event loop: it must give the loop a turn between its chunks of rows.
    expect(counter.turns).toBeGreaterThanOrEqual(4);
    // Inside the open transaction the connection is the batch's: a read waits for the commit (SQLite) or sees none of it (PostgreSQL).
    expect(seen.length).toBeGreaterThan(0);
    for (const n of seen) expect([0, BATCH.maxItems]).toContain(n);
  });

  it('admits a batch in item order: its items share queued_at, and their ids keep the order they were made in', async () => {
    const agent = await newAgent({ max_parallel: 40 });
    const r = await batch(
      agent,
      Array.from({ length: 40 }, (_, i) => ({ message: `m${i}` })),
    );
    expect(r.status).toBe(200);
    const ids = r.body.items.map((i: any) => i.execution_id);
    const rows = await rowsOf(agent);
    expect(new Set(rows.map((x) => x.queued_at)).size).toBeLessThanOrEqual(2); // one engine instant (or two, across a tick)
    const claim = await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0, max: 40 });
    expect(claim.body.tasks.map((t: any) => t.execution_id)).toEqual(ids);
    expect(claim.body.tasks.map((t: any) => t.message)).toEqual(ids.map((_: string, i: number) => `m${i}`));
  });

  it('partial success: the items that fit the backlog are created, the rest refused backlog_full, in one commit', async () => {
    const agent = await newAgent({ max_backlog: 5 });
    expect((await batch(agent, [{ message: 'x' }, { message: 'y' }])).body.created).toBe(2);
    const r = await batch(
      agent,
      Array.from({ length: 5 }, (_, i) => ({ message: `m${i}` })),
    );
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ created: 3, refused: 2, replayed: 0 });
    expect(r.body.items.slice(0, 3).every((i: any) => i.status === 'queued')).toBe(true);
    expect(r.body.items.slice(3)).toEqual([
      { index: 3, error: 'backlog_full', message: expect.stringMatching(/^body\.items\.3: agent '.*' already has 5 queued/) },
      { index: 4, error: 'backlog_full', message: expect.stringMatching(/^body\.items\.4:/) },
    ]);
    expect((await rowsOf(agent)).map((x) => x.message).sort()).toEqual(['m0', 'm1', 'm2', 'x', 'y']);
    const refusal = await ts.store.db
      .selectFrom('audit_log')
      .select('detail')
      .where('subject', '=', agent)
      .where('action', '=', 'execution.refused')
      .executeTakeFirstOrThrow();
    expect(JSON.parse(refusal.detail!)).toEqual({ error: 'backlog_full', batch: true, count: 2 });
    // A full backlog refuses every item; nothing is created.
    const none = await batch(agent, [{ message: 'late' }]);
    expect(none.body).toMatchObject({ created: 0, refused: 1 });
    expect(await rowsOf(agent)).toHaveLength(5);
  });

  it('a retried batch never duplicates an item: keyed items replay their first execution (and keys work across single submit)', async () => {
    const agent = await newAgent();
    const items = [
      { message: 'one', idempotency_key: 'k-1' },
      { message: 'two', payload: { p: 2 }, idempotency_key: 'k-2' },
      { message: 'unkeyed' },
    ];
    const first = await batch(agent, items);
    expect(first.body).toMatchObject({ created: 3, replayed: 0 });
    const again = await batch(agent, items);
    expect(again.body).toMatchObject({ created: 1, replayed: 2 });
    expect(again.body.items[0]).toEqual({ index: 0, execution_id: first.body.items[0].execution_id, status: 'queued', replayed: true });
    expect(again.body.items[1]).toEqual({ index: 1, execution_id: first.body.items[1].execution_id, status: 'queued', replayed: true });
    expect(again.body.items[2].execution_id).not.toBe(first.body.items[2].execution_id); // no key: a new task
    expect(await rowsOf(agent)).toHaveLength(4);

    // The key is the agent's: a single submit with the same key and body replays the batch item…
    const single = await post(`/v1/agents/${agent}/executions`, { message: 'two', payload: { p: 2 } }, { 'idempotency-key': 'k-2' });
    expect(single.status).toBe(201);
    expect(single.body.execution_id).toBe(first.body.items[1].execution_id);
    expect(single.body.execution.message).toBe('two');
    // …and a batch item replays a single submit's key.
    const s3 = await post(`/v1/agents/${agent}/executions`, { message: 'three' }, { 'idempotency-key': 'k-3' });
    const b3 = await batch(agent, [{ message: 'three', idempotency_key: 'k-3' }]);
    expect(b3.body.items[0]).toEqual({ index: 0, execution_id: s3.body.execution_id, status: 'queued', replayed: true });
    // The same key with another request: refused for that item only.
    const reused = await batch(agent, [
      { message: 'not one', idempotency_key: 'k-1' },
      { message: 'fresh', idempotency_key: 'k-4' },
    ]);
    expect(reused.body).toMatchObject({ created: 1, refused: 1 });
    expect(reused.body.items[0]).toMatchObject({
      index: 0,
      error: 'idempotency_key_reused',
      message: expect.stringMatching(/^body\.items\.0\.idempotency_key:/),
    });
    // Another agent's keys are its own.
    const other = await newAgent();
    expect((await batch(other, [{ message: 'one', idempotency_key: 'k-1' }])).body.created).toBe(1);
    // A backlog_full refusal does not spend the key: the retry creates it once there is room.
    const tight = await newAgent({ max_backlog: 1 });
    const full = await batch(tight, [
      { message: 'a', idempotency_key: 't-1' },
      { message: 'b', idempotency_key: 't-2' },
    ]);
    expect(full.body.items.map((i: any) => i.error ?? i.status)).toEqual(['queued', 'backlog_full']);
    await engine.cancel(full.body.items[0].execution_id, 'test');
    const retried = await batch(tight, [
      { message: 'a', idempotency_key: 't-1' },
      { message: 'b', idempotency_key: 't-2' },
    ]);
    expect(retried.body.items.map((i: any) => [i.status, i.replayed ?? false])).toEqual([
      ['queued', true],
      ['queued', false],
    ]);
  });

  it('concurrent batches and single submits sharing keys create each keyed task exactly once', async () => {
    const agent = await newAgent();
    const keys = Array.from({ length: 40 }, (_, i) => `c-${i}`);
    const items = keys.map((k) => ({ message: `task ${k}`, idempotency_key: k }));
    const batches = [items, [...items].reverse(), items.slice(20)];
    const singles = keys.slice(0, 10);
    const [batchAnswers, singleAnswers] = await Promise.all([
      Promise.all(batches.map((b) => batch(agent, b))),
      Promise.all(singles.map((k) => post(`/v1/agents/${agent}/executions`, { message: `task ${k}` }, { 'idempotency-key': k }))),
    ]);
    const rows = await rowsOf(agent);
    expect(rows).toHaveLength(40);
    const idOf = new Map(rows.map((r) => [r.idempotency_key, r.id]));
    batchAnswers.forEach((a, b) => {
      expect(a.status).toBe(200);
      for (const it of a.body.items) {
        // Each item answered with its key's one execution, or (racing a single submit) "in flight".
        if (it.error) expect(it.error).toBe('idempotency_in_flight');
        else expect(it.execution_id).toBe(idOf.get(batches[b]![it.index]!.idempotency_key));
      }
    });
    singleAnswers.forEach((a, i) => {
      if (a.status === 201) expect(a.body.execution_id).toBe(idOf.get(singles[i]!));
      else expect(a.body.error).toBe('idempotency_in_flight');
    });
    // Every key ends with exactly one execution.
    expect(new Set(rows.map((r) => r.idempotency_key)).size).toBe(40);
  });

  it('keys follow the header rules: expired is free, a dead in-flight claim is taken over, a live one is refused for now', async () => {
    const agent = await newAgent();
    const now = engine.now();
    const hash = (message: string) => fingerprint('submit', agent, JSON.stringify({ message }));
    const key = (idem_key: string, message: string, over: Record<string, unknown>) => ({
      scope: `agent:${agent}`,
      idem_key,
      request_hash: hash(message),
      state: 'completed' as const,
      locked_until: now,
      status_code: 201,
      response: JSON.stringify({ execution_id: 'ex_gone', status: 'queued' }),
      execution_id: 'ex_gone',
      created_at: now - 1000,
      expires_at: now + 60_000,
      ...over,
    });
    await ts.store.db
      .insertInto('idempotency_keys')
      .values([
        key('expired', 'e', { expires_at: now - 1 }),
        key('dead', 'd', { state: 'in_flight', locked_until: now - 1, status_code: null, response: null, execution_id: null }),
        key('live', 'l', { state: 'in_flight', locked_until: now + 60_000, status_code: null, response: null, execution_id: null }),
      ])
      .execute();
    const r = await batch(agent, [
      { message: 'e', idempotency_key: 'expired' },
      { message: 'd', idempotency_key: 'dead' },
      { message: 'l', idempotency_key: 'live' },
    ]);
    expect(r.body.items.map((i: any) => i.error ?? (i.replayed ? 'replayed' : i.status))).toEqual([
      'queued',
      'queued',
      'idempotency_in_flight',
    ]);
    const keys = await ts.store.db
      .selectFrom('idempotency_keys')
      .selectAll()
      .where('scope', '=', `agent:${agent}`)
      .orderBy('idem_key')
      .execute();
    expect(keys.map((k) => [k.idem_key, k.state, k.execution_id])).toEqual([
      ['dead', 'completed', r.body.items[1].execution_id],
      ['expired', 'completed', r.body.items[0].execution_id],
      ['live', 'in_flight', null],
    ]);
    // The stored answer is a single submit's: a single submit with the key replays it in full.
    const single = await post(`/v1/agents/${agent}/executions`, { message: 'e' }, { 'idempotency-key': 'expired' });
    expect(single.status).toBe(201);
    expect(single.body).toMatchObject({
      execution_id: r.body.items[0].execution_id,
      agent,
      agent_paused: false,
      execution: { message: 'e' },
    });
  });

  it('refuses a bad batch whole, naming the item and the field; nothing is created', async () => {
    const agent = await newAgent();
    refused(await batch(agent, [{ message: 'ok' }, { payload: 1 }]), 400, 'validation_error', /body\.items\.1\.message/);
    refused(await batch(agent, [{ message: 'ok' }, { message: 'x', colour: 'red' }]), 400, 'validation_error', /body\.items\.1.*colour/);
    refused(await batch(agent, [{ message: 'x', priority: 5000 }]), 400, 'validation_error', /body\.items\.0\.priority/);
    refused(
      await batch(agent, [{ message: 'x', idempotency_key: 'has space' }]),
      400,
      'validation_error',
      /body\.items\.0\.idempotency_key/,
    );
    refused(
      await batch(agent, [{ message: 'x', run_after: new Date().toISOString(), delay_seconds: 1 }]),
      400,
      'validation_error',
      /body\.items\.0\.run_after, body\.items\.0\.delay_seconds/,
    );
    refused(
      await batch(agent, [{ message: 'x', idempotency_key: 'dup' }, { message: 'y' }, { message: 'z', idempotency_key: 'dup' }]),
      400,
      'validation_error',
      /body\.items\.2\.idempotency_key: repeats body\.items\.0/,
    );
    refused(await batch(agent, []), 400, 'validation_error', /body\.items/);
    refused(await post(`/v1/agents/${agent}/executions/batch`, {}), 400, 'validation_error', /body\.items/);
    const tooMany = Array.from({ length: BATCH.maxItems + 1 }, () => ({ message: 'x' }));
    refused(await batch(agent, tooMany), 400, 'validation_error', /body\.items/);
    refused(
      await batch(agent, [{ message: 'ok' }, { message: 'big', payload: 'x'.repeat(300 * 1024) }]),
      413,
      'payload_too_large',
      /body\.items\.1\.payload/,
    );
    refused(await batch(agent, [{ message: 'x' }], { 'idempotency-key': 'whole' }), 400, 'validation_error', /Idempotency-Key/);
    refused(await batch('no-such-agent', [{ message: 'x' }]), 404, 'not_found', /no-such-agent/);
    expect(await rowsOf(agent)).toHaveLength(0);
    // The bound itself is accepted.
    const max = await batch(
      agent,
      Array.from({ length: BATCH.maxItems }, (_, i) => ({ message: `m${i}` })),
    );
    expect(max.body.created).toBe(BATCH.maxItems);
  });

  it('is for admins: an agent-scoped key is refused', async () => {
    const agent = await newAgent();
    const k = await post('/v1/keys', { name: 'w', scope: 'agent', agent });
    const r = await app.inject({
      method: 'POST',
      url: `/v1/agents/${agent}/executions/batch`,
      headers: { authorization: `Bearer ${k.body.key}` },
      payload: { items: [{ message: 'x' }] },
    });
    expect(r.statusCode).toBe(403);
  });
});

describe(`complete and claim in one request (${STORE_KIND})`, () => {
  it('answers with the completion and the next tasks, never above the cap', async () => {
    const agent = await newAgent({ max_parallel: 2 });
    await batch(
      agent,
      Array.from({ length: 6 }, (_, i) => ({ message: `t${i}` })),
    );
    const [a, b] = (await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0, max: 2 })).body.tasks;
    // One seat frees: the claim gets one task, however many it asks for.
    const r = await post(`/v1/executions/${a.execution_id}/complete`, {
      lease_token: a.lease_token,
      status: 'succeeded',
      result: { ok: 1 },
      claim: { max: 5, worker_id: 'w-1' },
    });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ id: a.execution_id, status: 'succeeded', result: { ok: 1 } });
    expect(r.body.tasks).toHaveLength(1);
    const c = r.body.tasks[0];
    expect(c).toMatchObject({ agent, attempt: 1 });
    const running = await ts.store.db
      .selectFrom('executions')
      .selectAll()
      .where('agent', '=', agent)
      .where('status', '=', 'running')
      .execute();
    expect(running.map((x) => x.id).sort()).toEqual([b.execution_id, c.execution_id].sort());
    expect(running.find((x) => x.id === c.execution_id)!.lease_owner).toBe('w-1');
    // Without claim the answer is the execution as before (no tasks field).
    const plain = await post(`/v1/executions/${b.execution_id}/complete`, { lease_token: b.lease_token, status: 'succeeded' });
    expect(plain.status).toBe(200);
    expect(plain.body.tasks).toBeUndefined();
    // A failure claims too; the default max is 1.
    const f = await post(`/v1/executions/${c.execution_id}/complete`, {
      lease_token: c.lease_token,
      status: 'failed',
      error: { message: 'boom' },
      claim: {},
    });
    expect(f.body.status).toBe('failed');
    expect(f.body.tasks).toHaveLength(1);
  });

  it('fencing holds: a stale or wrong token is refused and claims nothing', async () => {
    const agent = await newAgent({ max_parallel: 3 });
    await batch(
      agent,
      Array.from({ length: 4 }, (_, i) => ({ message: `t${i}` })),
    );
    const [t] = (await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0, max: 1 })).body.tasks;
    const wrong = await post(`/v1/executions/${t.execution_id}/complete`, {
      lease_token: 'ls_not-it',
      status: 'succeeded',
      claim: { max: 3 },
    });
    expect(wrong.status).toBe(409);
    expect(wrong.body.error).toBe('lease_lost');
    const ok = await post(`/v1/executions/${t.execution_id}/complete`, {
      lease_token: t.lease_token,
      status: 'succeeded',
      claim: { max: 1 },
    });
    expect(ok.body.tasks).toHaveLength(1);
    // The same completion again (its token is now stale): refused, and nothing more is claimed.
    const stale = await post(`/v1/executions/${t.execution_id}/complete`, {
      lease_token: t.lease_token,
      status: 'succeeded',
      claim: { max: 3 },
    });
    expect(stale.status).toBe(409);
    expect(stale.body.error).toBe('lease_lost');
    const counts = await ts.store.db.selectFrom('executions').select('status').where('agent', '=', agent).execute();
    expect(counts.filter((x) => x.status === 'running')).toHaveLength(1);
    expect(counts.filter((x) => x.status === 'queued')).toHaveLength(2);
  });

  it('a claim that cannot run after a committed completion says why; the completion stands', async () => {
    const agent = await newAgent({ max_parallel: 2 });
    await batch(agent, [{ message: 'a' }, { message: 'b' }]);
    const [t] = (await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0 })).body.tasks;
    await post(`/v1/agents/${agent}/pause`, { reason: 'maintenance' });
    const r = await post(`/v1/executions/${t.execution_id}/complete`, {
      lease_token: t.lease_token,
      status: 'succeeded',
      claim: { max: 2 },
    });
    expect(r.status).toBe(200);
    expect(r.body.status).toBe('succeeded');
    expect(r.body.tasks).toEqual([]); // a paused agent admits nothing
    // Bad claim options are refused before anything is done.
    const [u] = (await post(`/v1/agents/${(await newAgent()).toString()}/claim`, { wait_seconds: 0 })).body?.tasks ?? [undefined];
    expect(u).toBeUndefined();
    const bad = await post(`/v1/executions/${t.execution_id}/complete`, {
      lease_token: t.lease_token,
      status: 'succeeded',
      claim: { max: 0 },
    });
    refused(bad, 400, 'validation_error', /body\.claim\.max/);
  });

  it('a worker completing and claiming in one request drains N tasks exactly once under the cap', async () => {
    const agent = await newAgent({ max_parallel: 3 });
    const N = 60;
    await batch(
      agent,
      Array.from({ length: N }, (_, i) => ({ message: `t${i}` })),
    );
    const done: string[] = [];
    let requests = 0;
    // Three slots, each: complete the task in hand and take the next in the same request.
    const first = (await post(`/v1/agents/${agent}/claim`, { wait_seconds: 0, max: 3 })).body.tasks as any[];
    requests++;
    expect(first).toHaveLength(3);
    await Promise.all(
      first.map(async (t0) => {
        let t = t0;
        while (t) {
          const r = await post(`/v1/executions/${t.execution_id}/complete`, {
            lease_token: t.lease_token,
            status: 'succeeded',
            claim: { max: 1 },
          });
          requests++;
          expect(r.status).toBe(200);
          done.push(t.execution_id);
          t = r.body.tasks[0];
        }
      }),
    );
    expect(done).toHaveLength(N);
    expect(new Set(done).size).toBe(N);
    expect(requests).toBe(N + 1);
    const rows = await rowsOf(agent);
    expect(rows.every((r) => r.status === 'succeeded' && r.attempt === 1)).toBe(true);
    // The cap held at every step: replay the admissions and completions in commit order.
    const events = await ts.store.db
      .selectFrom('execution_events')
      .select(['to_status'])
      .where(
        'execution_id',
        'in',
        rows.map((r) => r.id),
      )
      .orderBy('id')
      .execute();
    let seats = 0;
    let most = 0;
    for (const e of events) {
      if (e.to_status === 'running') most = Math.max(most, ++seats);
      else if (e.to_status === 'succeeded') seats--;
    }
    expect(most).toBe(3);
  });
});

describe(`the SDK worker uses them (${STORE_KIND})`, () => {
  let ts2: TestStore;
  let node: BatonNode;
  let api: BatonClient;
  let key: string;
  beforeAll(async () => {
    ts2 = await openTestStore();
    ({ node, api, key } = await startTestNode(ts2, { dispatcher: false }));
  });
  afterAll(async () => {
    await node?.stop();
    await ts2?.cleanup();
  });

  /** Requests answered per route pattern and method, from /metrics. */
  async function requestCounts(): Promise<Map<string, number>> {
    const text = await (await fetch(`${node.url}/metrics`)).text();
    const out = new Map<string, number>();
    for (const m of text.matchAll(/^baton_http_request_duration_seconds_count\{([^}]*)\} (\d+)/gm)) {
      const labels = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
      const k = `${labels.method} ${labels.route}`;
      out.set(k, (out.get(k) ?? 0) + Number(m[2]));
    }
    return out;
  }

  it('client.submitMany, then a worker of concurrency 3 drains the batch once, taking its next tasks with its completions', async () => {
    const agent = 'sdk-batch';
    await api.createAgent({ name: agent, max_parallel: 3, max_backlog: 500 });
    const N = 90;
    const answer = await api.submitMany(
      agent,
      Array.from({ length: N }, (_, i) => ({ message: `task ${i}`, payload: { i } })),
    );
    expect(answer.created).toBe(N);
    const before = await requestCounts();
    let now = 0;
    let most = 0;
    const seen: number[] = [];
    const w = createWorker({
      server: node.url,
      key,
      agent,
      concurrency: 3,
      claimWaitSeconds: 1,
      async handler(task) {
        most = Math.max(most, ++now);
        seen.push((task.payload as { i: number }).i);
        await new Promise((r) => setTimeout(r, 2));
        now--;
        return { i: (task.payload as { i: number }).i };
      },
    });
    await w.start();
    try {
      await until('all done', async () => {
        const rows = await ts2.store.db.selectFrom('executions').select('status').where('agent', '=', agent).execute();
        return rows.filter((r) => r.status === 'succeeded').length === N || undefined;
      });
    } finally {
      await w.stop();
    }
    expect(seen.sort((a, b) => a - b)).toEqual(Array.from({ length: N }, (_, i) => i));
    expect(most).toBeLessThanOrEqual(3);
    const rows = await ts2.store.db.selectFrom('executions').select(['attempt', 'status']).where('agent', '=', agent).execute();
    expect(rows.every((r) => r.attempt === 1 && r.status === 'succeeded')).toBe(true);
    const after = await requestCounts();
    const delta = (k: string) => (after.get(k) ?? 0) - (before.get(k) ?? 0);
    // One completion request per task at most: those ready in the same turn go as one (POST /v1/completions).
    const completions = delta('POST /v1/executions/:id/complete') + delta('POST /v1/completions');
    expect(completions).toBeGreaterThan(0);
    expect(completions).toBeLessThanOrEqual(N);
    // Most tasks came with a completion: separate claims are the first ones and the few after an empty answer.
    expect(delta('POST /v1/agents/:agent/claim')).toBeLessThan(N / 3);
  });
});
