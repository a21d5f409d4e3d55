/**
 * POST /v1/claim: one long-poll claim for several agents, POST /v1/claim/widen and POST /v1/claim/withdraw. A real
 * `baton up` on each store: bad bodies are 400s naming the field, an unknown agent 404 naming it;
 * each agent gives at most its `max` and its free seats; a parked claim wakes for work queued for
 * any of its agents or a seat freed, takes agents added while it waits, and ends when withdrawn,
 * answering normally.
 */
import { describe, expect, it } from 'vitest';
import type { BatonClient } from '../../src/client.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { testNodeHooks } from '../helpers/delivery.ts';
import { STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let node: BatonNode;
let api: BatonClient;
let key: string;

testNodeHooks((t) => ({ ts, node, api, key } = t));

async function post(path: string, body: unknown, as = key): Promise<{ status: number; json: any }> {
  const r = await fetch(`${node.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${as}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null };
}

const claim = (body: unknown, as?: string) => post('/v1/claim', body, as);
/** Give a claim time to reach the server and park (what it answers does not depend on it). */
const parked = () => new Promise((r) => setTimeout(r, 300));

describe(`POST /v1/claim (${STORE_KIND})`, () => {
  it('refuses bad bodies with 400 naming the field, and an unknown agent with 404 naming it', async () => {
    await api.createAgent({ name: 'ca-known' });
    const cases: Array<[unknown, RegExp]> = [
      [{ agents: [] }, /agents/],
      [{}, /agents/],
      [{ agents: Array.from({ length: 1001 }, (_, i) => ({ agent: `ca-${i}` })) }, /agents/],
      [{ agents: [{ agent: 'ca-known' }, { agent: 'ca-known' }] }, /agents\.1\.agent.*twice/],
      [{ agents: [{ agent: 'ca-known', max: 0 }] }, /agents\.0\.max/],
      [{ agents: [{ agent: 'ca-known', max: 101 }] }, /agents\.0\.max/],
      [{ agents: [{ agent: 'Bad Name' }] }, /agents\.0\.agent/],
      [{ agents: [{ agent: 'ca-known' }], wait_seconds: -1 }, /wait_seconds/],
      [{ agents: [{ agent: 'ca-known' }], extra: 1 }, /extra/],
    ];
    for (const [body, field] of cases) {
      const r = await claim(body);
      expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(r.json.error).toBe('validation_error');
      expect(r.json.message).toMatch(field);
    }
    const unknown = await claim({ agents: [{ agent: 'ca-known' }, { agent: 'ca-nobody' }], wait_seconds: 0 });
    expect(unknown.status).toBe(404);
    expect(unknown.json.error).toBe('not_found');
    expect(unknown.json.message).toContain('ca-nobody');
    // Parked too: the first look names it before any wait.
    const parkedUnknown = await claim({ agents: [{ agent: 'ca-nobody' }], wait_seconds: 5 });
    expect(parkedUnknown.status).toBe(404);
  });

  it('refuses an agent the key is not scoped to (403), and a push agent (409)', async () => {
    await api.createAgent({ name: 'ca-mine' });
    await api.createAgent({ name: 'ca-theirs' });
    await api.createAgent({ name: 'ca-push', delivery: 'push', push_url: 'http://127.0.0.1:9/x' });
    const { key: scoped } = await api.createKey({ name: 'ca-scoped', scope: 'agent', agent: 'ca-mine' });
    const r = await claim({ agents: [{ agent: 'ca-mine' }, { agent: 'ca-theirs' }], wait_seconds: 0 }, scoped);
    expect(r.status).toBe(403);
    expect(r.json.message).toContain('ca-theirs');
    expect((await claim({ agents: [{ agent: 'ca-mine' }], wait_seconds: 0 }, scoped)).status).toBe(204);
    const push = await claim({ agents: [{ agent: 'ca-push' }], wait_seconds: 0 });
    expect(push.status).toBe(409);
    expect(push.json.error).toBe('wrong_delivery');
  });

  it('gives each agent at most its `max` and its free seats, exactly', async () => {
    await api.createAgent({ name: 'ca-cap2', max_parallel: 2 });
    await api.createAgent({ name: 'ca-cap1', max_parallel: 1 });
    await api.createAgent({ name: 'ca-cap5', max_parallel: 5 });
    for (const a of ['ca-cap2', 'ca-cap1', 'ca-cap5']) for (let i = 0; i < 5; i++) await api.submit(a, { message: `${a} ${i}` });
    const body = {
      agents: [
        { agent: 'ca-cap2', max: 5 },
        { agent: 'ca-cap1', max: 5 },
        { agent: 'ca-cap5', max: 3 },
      ],
      wait_seconds: 0,
    };
    const first = await claim(body);
    expect(first.status).toBe(200);
    const count = (tasks: Array<{ agent: string }>, a: string) => tasks.filter((t) => t.agent === a).length;
    expect([count(first.json.tasks, 'ca-cap2'), count(first.json.tasks, 'ca-cap1'), count(first.json.tasks, 'ca-cap5')]).toEqual([2, 1, 3]);
    for (const t of first.json.tasks) expect(t.lease_token).toBeTruthy();
    // Again: the capped agents are full; the third has two seats left and gives two.
    const second = await claim(body);
    expect(second.json.tasks.map((t: { agent: string }) => t.agent)).toEqual(['ca-cap5', 'ca-cap5']);
    expect((await claim(body)).status).toBe(204);
    // The leases fence as a single claim's: complete one with its token, a wrong token is refused.
    const t = first.json.tasks[0];
    expect((await post(`/v1/executions/${t.execution_id}/complete`, { lease_token: 'wrong', status: 'succeeded' })).status).toBe(409);
    expect((await post(`/v1/executions/${t.execution_id}/complete`, { lease_token: t.lease_token, status: 'succeeded' })).status).toBe(200);
    const running = await ts.store.db
      .selectFrom('executions')
      .select(['agent', (eb) => eb.fn.countAll<number>().as('n')])
      .where('status', '=', 'running')
      .where('agent', 'in', ['ca-cap2', 'ca-cap1', 'ca-cap5'])
      .groupBy('agent')
      .execute();
    const byAgent = Object.fromEntries(running.map((r) => [r.agent, Number(r.n)]));
    expect(byAgent['ca-cap1']).toBe(1);
    expect(byAgent['ca-cap5']).toBe(5);
  });

  it('wakes for work queued for any of its agents, and for a seat freed', async () => {
    const agents = ['ca-w1', 'ca-w2', 'ca-w3'];
    for (const a of agents) await api.createAgent({ name: a, max_parallel: 1 });
    const body = { agents: agents.map((agent) => ({ agent, max: 1 })), wait_seconds: 20, worker_id: 'w' };
    // Twice: the second claim's first look skips the agents the first found idle, and still wakes.
    for (const target of ['ca-w2', 'ca-w3']) {
      const waiting = claim(body);
      await parked();
      const { execution_id } = await api.submit(target, { message: 'wake' });
      const r = await waiting;
      expect(r.status).toBe(200);
      expect(r.json.tasks.map((t: { execution_id: string }) => t.execution_id)).toEqual([execution_id]);
    }
    // ca-w2 is at its cap with a task queued behind it: a claim waits, and a completion frees the seat.
    const queued = await api.submit('ca-w2', { message: 'behind' });
    const waiting = claim(body);
    await parked();
    const running = await ts.store.db
      .selectFrom('executions')
      .select(['id', 'lease_token'])
      .where('agent', '=', 'ca-w2')
      .where('status', '=', 'running')
      .executeTakeFirstOrThrow();
    await api.complete(running.id, { lease_token: running.lease_token!, status: 'succeeded' });
    const r = await waiting;
    expect(r.json.tasks.map((t: { execution_id: string }) => t.execution_id)).toEqual([queued.execution_id]);
  });

  it('ends its wait when withdrawn, answering as a wait that ran out; only its own key can withdraw it', async () => {
    await api.createAgent({ name: 'ca-wd' });
    const { key: other } = await api.createKey({ name: 'ca-wd-other', scope: 'admin' });
    const waiting = claim({ agents: [{ agent: 'ca-wd' }], wait_seconds: 30, claim_id: 'c1' });
    await parked();
    expect((await post('/v1/claim/withdraw', { claim_id: 'c1' }, other)).json).toEqual({ withdrawn: false });
    expect((await post('/v1/claim/withdraw', { claim_id: 'c2' })).json).toEqual({ withdrawn: false });
    expect((await post('/v1/claim/withdraw', { claim_id: 'c1' })).json).toEqual({ withdrawn: true });
    expect((await waiting).status).toBe(204);
    // Answered: its id is free again, and withdrawing it now finds nothing.
    expect((await post('/v1/claim/withdraw', { claim_id: 'c1' })).json).toEqual({ withdrawn: false });
    expect((await post('/v1/claim/withdraw', {})).status).toBe(400);
  });

  it('takes agents added while it waits (POST /v1/claim/widen), each within its `max`; only its own key, only while it waits', async () => {
    await api.createAgent({ name: 'ca-wa', max_parallel: 1 });
    await api.createAgent({ name: 'ca-wb', max_parallel: 1 });
    await api.createAgent({ name: 'ca-wc', max_parallel: 5 });
    const { key: other } = await api.createKey({ name: 'ca-wi-other', scope: 'admin' });
    const { key: scoped } = await api.createKey({ name: 'ca-wi-scoped', scope: 'agent', agent: 'ca-wa' });
    const widen = (body: unknown, as?: string) => post('/v1/claim/widen', body, as);
    const ids = (r: { json: any }) => r.json.tasks.map((t: { execution_id: string }) => t.execution_id);
    // ca-wb known to have nothing queued (a look just found none): armed and offered to its submits, no look.
    expect((await claim({ agents: [{ agent: 'ca-wb' }], wait_seconds: 0 })).status).toBe(204);
    const waiting = claim({ agents: [{ agent: 'ca-wa' }], wait_seconds: 30, claim_id: 'w1' });
    await parked();
    expect((await widen({ claim_id: 'w1', agents: [{ agent: 'ca-wb' }] }, other)).json).toEqual({ widened: false });
    expect((await widen({ claim_id: 'w1', agents: [{ agent: 'ca-wb' }] }, scoped)).status).toBe(403);
    expect((await widen({ claim_id: 'w2', agents: [{ agent: 'ca-wb' }] })).json).toEqual({ widened: false });
    expect((await widen({ claim_id: 'w1', agents: [{ agent: 'ca-wa' }] })).json).toEqual({ widened: false }); // in it already
    expect((await widen({ claim_id: 'w1', agents: [{ agent: 'ca-wb' }] })).json).toEqual({ widened: true });
    const { execution_id } = await api.submit('ca-wb', { message: 'for the widened claim' });
    const r = await waiting;
    expect(r.status).toBe(200);
    expect(ids(r)).toEqual([execution_id]);
    // Answered: widening it now takes nothing.
    expect((await widen({ claim_id: 'w1', agents: [{ agent: 'ca-wc' }] })).json).toEqual({ widened: false });
    expect((await widen({ claim_id: 'w1', agents: [] })).status).toBe(400);
    // ca-wc has work queued already: the widened claim looks at it, and takes its `max`, exactly.
    for (let i = 0; i < 3; i++) await api.submit('ca-wc', { message: `queued ${i}` });
    const waiting2 = claim({ agents: [{ agent: 'ca-wa' }], wait_seconds: 30, claim_id: 'w3' });
    await parked();
    expect((await widen({ claim_id: 'w3', agents: [{ agent: 'ca-wc', max: 2 }] })).json).toEqual({ widened: true });
    const r2 = await waiting2;
    expect(r2.status).toBe(200);
    expect(r2.json.tasks.map((t: { agent: string }) => t.agent)).toEqual(['ca-wc', 'ca-wc']);
  });
});
