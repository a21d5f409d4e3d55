import { createServer } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Canary } from '../../src/canary/service.ts';
import { Dispatcher } from '../../src/delivery/dispatcher.ts';
import { AHEAD_COUNT_CAP, NO_WORKER_AFTER_MS, WAITING_REASONS } from '../../src/domain/admission.ts';
import { CONTRACT_DEFAULTS } from '../../src/domain/defaults.ts';
import { BatonError } from '../../src/domain/errors.ts';
import { Engine } from '../../src/engine/engine.ts';
import { admit } from '../../src/engine/transitions/admit.ts';
import { createNodeMetrics } from '../../src/metrics.ts';
import { openStore } from '../../src/store/open.ts';
import { inProcessApi } from '../helpers/api.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

// Pause and resume, and `waiting`: deterministic, on the manual clock, on both stores.

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let n = 0;
let agent: string;
const DAY = 86_400_000;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'admission-test', backlogExpiryMs: DAY });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});
beforeEach(async () => {
  agent = `agent-${++n}`;
  await engine.agents.create({ name: agent, max_parallel: 2, max_backlog: 4 }, 'test');
});

/** Submit, a millisecond apart: admission order is (priority, queued_at, id), and ids are random. */
const submit = (message = 'task', extra: Parameters<Engine['submit']>[1] = { message }) => {
  clock.advance(1);
  return engine.submit(agent, { ...extra, message }, 'key:test');
};
const waitingOf = async (id: string) => (await engine.getExecution(id)).waiting;

describe(`pause and resume (${STORE_KIND})`, () => {
  it('a paused agent admits nothing, its queue fills up to the backlog, running work finishes; resume admits', async () => {
    await submit('first');
    const [running] = await engine.claim(agent, { owner: 'w1' });
    expect(running).toBeDefined();

    const paused = await engine.agents.pause(agent, 'rotating the API key', 'key:ops');
    expect(paused.changed).toBe(true);
    expect(paused.agent).toMatchObject({ paused_by: 'key:ops', paused_reason: 'rotating the API key', paused_at: clock() });

    // The queue keeps filling, up to max_backlog (4), and no more.
    for (let i = 0; i < 4; i++) await submit(`queued ${i}`);
    const full = await engine.submit(agent, { message: 'one too many' }, 'key:test').catch((e) => e);
    expect(full).toBeInstanceOf(BatonError);
    expect((full as BatonError).code).toBe('backlog_full');
    // Claims return nothing, though a seat is free.
    expect(await engine.claim(agent, { owner: 'w1', max: 4 })).toEqual([]);
    // The running task finishes normally.
    const done = await engine.complete(running!.id, running!.lease_token!, { status: 'succeeded' }, 'w1');
    expect(done.status).toBe('succeeded');
    expect(await engine.claim(agent, { owner: 'w1', max: 4 })).toEqual([]);

    const resumed = await engine.agents.resume(agent, 'key:ops');
    expect(resumed.changed).toBe(true);
    expect(resumed.agent.paused_at).toBeNull();
    const admitted = await engine.claim(agent, { owner: 'w1', max: 4 });
    expect(admitted.map((r) => r.message)).toEqual(['queued 0', 'queued 1']); // the cap (2) still holds
  });

  it('pausing is idempotent: the first who, why and since stay; one audit row each way', async () => {
    const first = await engine.agents.pause(agent, 'first reason', 'key:a');
    clock.advance(5_000);
    const second = await engine.agents.pause(agent, 'second reason', 'key:b');
    expect(second.changed).toBe(false);
    expect(second.agent).toMatchObject({ paused_by: 'key:a', paused_reason: 'first reason', paused_at: first.agent.paused_at });
    expect((await engine.agents.resume(agent, 'key:a')).changed).toBe(true);
    expect((await engine.agents.resume(agent, 'key:a')).changed).toBe(false);
    const audit = await ts.store.db
      .selectFrom('audit_log')
      .select(['action', 'actor', 'detail'])
      .where('subject', '=', agent)
      .where('action', 'in', ['agent.pause', 'agent.resume'])
      .orderBy('id')
      .execute();
    expect(audit.map((a) => [a.action, a.actor])).toEqual([
      ['agent.pause', 'key:a'],
      ['agent.resume', 'key:a'],
    ]);
    expect(JSON.parse(audit[0]!.detail!)).toEqual({ reason: 'first reason' });
    expect(JSON.parse(audit[1]!.detail!)).toMatchObject({ paused_by: 'key:a', paused_reason: 'first reason', paused_ms: 5_000 });
  });

  it('unknown agents are not found, for pause and resume alike', async () => {
    // One at a time: a second promise made before the first is awaited would reject unhandled.
    for (const call of [() => engine.agents.pause('no-such-agent', 'x', 'key:a'), () => engine.agents.resume('no-such-agent', 'key:a')]) {
      const err = await call().catch((e) => e);
      expect(err).toBeInstanceOf(BatonError);
      expect((err as BatonError).code).toBe('not_found');
    }
  });

  it('a pause survives a restart: a new store and engine on the same database still admit nothing', async () => {
    await submit('waits');
    await engine.agents.pause(agent, 'maintenance', 'key:ops');
    const store2 = openStore({ ...ts.location, poolMax: 2 });
    const engine2 = new Engine({ store: store2, clock, nodeId: 'restarted' });
    try {
      expect(await engine2.claim(agent, { owner: 'w2' })).toEqual([]);
      expect((await engine2.agents.get(agent)).agent).toMatchObject({ paused_by: 'key:ops', paused_reason: 'maintenance' });
      await engine2.agents.resume(agent, 'key:ops');
      expect(await engine2.claim(agent, { owner: 'w2' })).toHaveLength(1);
    } finally {
      engine2.close();
      await store2.close();
    }
  });

  it('push dispatch starts nothing for a paused push agent, and delivers after resume', async () => {
    const pushAgent = `push-${n}`;
    // Port 9 (discard) refuses connections here: each delivery fails fast as push_unreachable.
    await engine.agents.create({ name: pushAgent, max_parallel: 1, delivery: 'push', push_url: 'http://127.0.0.1:9/' }, 'test');
    await engine.agents.pause(pushAgent, 'target down', 'key:ops');
    const first = await engine.submit(pushAgent, { message: 'push me' }, 'key:test');
    const dispatcher = new Dispatcher(engine, { concurrency: 4 });
    try {
      expect(await dispatcher.dispatchOnce()).toBe(0);
      expect((await engine.getExecution(first.id)).execution.status).toBe('queued');
      expect((await waitingOf(first.id))?.reason).toBe('agent_paused');
      await engine.agents.resume(pushAgent, 'key:ops');
      await dispatcher.dispatchOnce();
      for (let i = 0; i < 200 && (await engine.getExecution(first.id)).execution.status !== 'failed'; i++)
        await new Promise((r) => setTimeout(r, 25));
    } finally {
      await dispatcher.stop();
    }
    const failed = (await engine.getExecution(first.id)).execution;
    expect(failed.error_code).toBe('push_unreachable');
    // With the dispatcher stopped, the next task waits, and the answer names the failing target.
    const next = await engine.submit(pushAgent, { message: 'next' }, 'key:test');
    const w = await waitingOf(next.id);
    expect(w).toMatchObject({ reason: 'push_failing', push_error: { execution_id: first.id, code: 'push_unreachable' } });
    expect(w!.summary).toMatch(/push target is failing/);
  });
});

describe(`a name used again (${STORE_KIND})`, () => {
  it("an agent created with a deleted agent's name counts that agent's work still running against its cap until it ends", async () => {
    const name = `${agent}-again`;
    await engine.agents.create({ name, max_parallel: 1 }, 'test');
    const old = await engine.submit(name, { message: 'old' }, 'test');
    const [held] = await engine.claim(name, { owner: 'w-old' });
    expect(held!.id).toBe(old.id);
    expect(await engine.agents.delete(name, 'test')).toMatchObject({ cancel_requested: 1 });

    // The same name again: the old run still holds the one seat.
    const again = await engine.agents.create({ name, max_parallel: 1 }, 'test');
    expect(again.running_count).toBe(1);
    expect(await engine.agents.get(name)).toMatchObject({ running: 1, queued: 0 });
    for (let i = 0; i < 3; i++) await engine.submit(name, { message: `new ${i}` }, 'test');
    expect(await engine.claim(name, { owner: 'w-new', max: 3 })).toEqual([]);

    // It ends (cancelled, as its deletion asked): the seat is the new agent's, and only one.
    await engine.complete(old.id, held!.lease_token!, { status: 'cancelled' }, 'w-old');
    expect(await engine.agents.get(name)).toMatchObject({ running: 0, queued: 3 });
    expect(await engine.claim(name, { owner: 'w-new', max: 3 })).toHaveLength(1);
    expect(await engine.agents.get(name)).toMatchObject({ running: 1, queued: 2 });

    // The canary finds the seat and backlog counters equal to the rows.
    await new Canary({ store: ts.store, nodeId: 'admission-test', clock, intervalMs: 60_000 }).runOnce({ full: true });
    const open = await ts.store.db
      .selectFrom('canary_violations')
      .select(['invariant', 'detail'])
      .where('agent', '=', name)
      .where('resolved_at', 'is', null)
      .execute();
    expect(open).toEqual([]);
  });
});

describe(`a claim's answer is bounded in bytes (${STORE_KIND})`, () => {
  // 240 KiB payloads: eight fit in CONTRACT_DEFAULTS.claimAnswerBytes (2 MiB), a ninth would not.
  const big = { blob: 'x'.repeat(240 * 1024) };
  const bytesOf = (rows: { message: string; payload: string }[]) =>
    rows.reduce((n, r) => n + Buffer.byteLength(r.message) + Buffer.byteLength(r.payload), 0);

  // With a budget the agent's claims take the transaction path on PostgreSQL too (the one-statement
  // claim leaves agents with a budget to it); without, the one-statement claim.
  for (const path of ['one statement', 'transaction'] as const) {
    it(`stops once the tasks taken carry CONTRACT_DEFAULTS.claimAnswerBytes; the rest come next, in order (${path})`, async () => {
      const name = `${agent}-bytes`;
      const budget = path === 'transaction' ? { limits: [{ metric: 'total_tokens' as const, window: 'day' as const, limit: 1e9 }] } : null;
      await engine.agents.create({ name, max_parallel: 20, max_backlog: 20, budget }, 'test');
      const ids: string[] = [];
      for (let i = 0; i < 10; i++) {
        clock.advance(1);
        ids.push((await engine.submit(name, { message: `big ${i}`, payload: big }, 'key:test')).id);
      }
      const first = await engine.claim(name, { owner: 'w1', max: 10 });
      expect(first.map((r) => r.id)).toEqual(ids.slice(0, 8));
      expect(bytesOf(first)).toBeLessThanOrEqual(CONTRACT_DEFAULTS.claimAnswerBytes);
      const rest = await engine.claim(name, { owner: 'w1', max: 10 });
      expect(rest.map((r) => r.id)).toEqual(ids.slice(8));
      // The rows past the bound stayed queued, nothing else: each was admitted once.
      const statuses = await ts.store.db.selectFrom('executions').select(['status', 'attempt']).where('agent', '=', name).execute();
      expect(statuses.every((r) => r.status === 'running' && Number(r.attempt) === 1)).toBe(true);
    });
  }

  it('push dispatch claims again after an answer cut at the bound: one pass starts every task it has seats for', async () => {
    // An agent that takes each task and never answers: the deliveries stay in flight.
    const hung = createServer(() => undefined);
    await new Promise<void>((r) => hung.listen(0, '127.0.0.1', r));
    const name = `${agent}-push-bytes`;
    const push_url = `http://127.0.0.1:${(hung.address() as { port: number }).port}/task`;
    await engine.agents.create({ name, max_parallel: 20, max_backlog: 20, delivery: 'push', push_url }, 'test');
    for (let i = 0; i < 10; i++) {
      clock.advance(1);
      await engine.submit(name, { message: `big ${i}`, payload: big }, 'key:test');
    }
    // Made after the submits, so no signal started a pass of its own.
    const dispatcher = new Dispatcher(engine, { concurrency: 16, shutdownGraceMs: 100 });
    try {
      await dispatcher.dispatchOnce();
      const rows = await ts.store.db.selectFrom('executions').select('status').where('agent', '=', name).execute();
      expect(rows.map((r) => r.status)).toEqual(Array(10).fill('running'));
    } finally {
      await dispatcher.stop();
      hung.closeAllConnections();
      await new Promise((r) => hung.close(r));
    }
  });

  it('takes one task when even one is over the bound (admit, and on PostgreSQL the one-statement claim)', async () => {
    type ClaimOf = (name: string, max: number) => Promise<{ message: string }[]>;
    const claimers: ClaimOf[] = [
      (name, max) =>
        ts.store.transaction((tx) => admit(tx, ts.store, name, { now: clock(), owner: 'w1', max, delivery: 'pull', maxBytes: 1000 })),
    ];
    const fast = ts.store.fastPaths;
    if (fast) {
      claimers.push(async (name, max) =>
        (await fast.claimMany([{ id: name, now: clock(), owner: 'w1', max, delivery: 'pull', maxBytes: 1000 }])).get(name)!,
      );
    }
    for (const [k, claimOf] of claimers.entries()) {
      const name = `${agent}-one-${k}`;
      await engine.agents.create({ name, max_parallel: 5, max_backlog: 5 }, 'test');
      for (const [message, payload] of [
        ['large', { blob: 'x'.repeat(2000) }],
        ['small one', {}],
        ['small two', {}],
      ] as const) {
        clock.advance(1);
        await engine.submit(name, { message, payload }, 'key:test');
      }
      const [one, ...none] = await claimOf(name, 3);
      expect(one?.message).toBe('large');
      expect(none).toEqual([]);
      // Two small ones fit under the bound together.
      expect((await claimOf(name, 3)).map((r) => r.message)).toEqual(['small one', 'small two']);
    }
  });
});

describe(`waiting: why a queued execution is not running (${STORE_KIND})`, () => {
  it('is null unless queued', async () => {
    const ex = await submit();
    const [row] = await engine.claim(agent, { owner: 'w1' });
    expect(row!.id).toBe(ex.id);
    expect(await waitingOf(ex.id)).toBeNull();
  });

  it('run_after not reached comes first, with the backlog expiry counted from run_after', async () => {
    await engine.agents.pause(agent, 'also paused', 'key:ops');
    const at = clock() + 60_000;
    const ex = await submit('later', { message: '', run_after: at });
    const w = await waitingOf(ex.id);
    expect(w).toMatchObject({
      reason: 'run_after',
      run_after: new Date(at).toISOString(),
      backlog_expires_at: new Date(at + DAY).toISOString(),
      ahead: 0,
      ahead_capped: false,
    });
    expect(w!.summary).toMatch(/in 60 s/);
  });

  it('agent_paused: by whom, why, since, and how many are ahead', async () => {
    const a = await submit('a');
    const b = await submit('b');
    await engine.agents.pause(agent, 'bill too high', 'key:ops');
    const w = await waitingOf(b.id);
    expect(w).toMatchObject({
      reason: 'agent_paused',
      paused: { by: 'key:ops', reason: 'bill too high', since: new Date(clock()).toISOString() },
      ahead: 1,
      backlog_expires_at: new Date(Number(b.queued_at) + DAY).toISOString(),
    });
    expect(w!.summary).toContain('bill too high');
    expect((await waitingOf(a.id))!.ahead).toBe(0);
  });

  it('serial_busy: a run with the same serial key is running', async () => {
    const first = await submit('one');
    const second = await submit('two');
    await ts.store.db
      .updateTable('executions')
      .set({ serial_key: `serial-${n}` })
      .where('id', 'in', [first.id, second.id])
      .execute();
    const [running] = await engine.claim(agent, { owner: 'w1', max: 2 });
    expect(running!.id).toBe(first.id);
    expect(await waitingOf(second.id)).toMatchObject({
      reason: 'serial_busy',
      serial: { serial_key: `serial-${n}`, execution_id: first.id },
    });
  });

  it('seats_taken: who holds the seats, for how long, and the position in the queue', async () => {
    await submit('a');
    await submit('b');
    const held = await engine.claim(agent, { owner: 'worker-7', max: 2 });
    expect(held).toHaveLength(2);
    const c = await submit('c');
    const d = await submit('d');
    clock.advance(90_000);
    const w = await waitingOf(d.id);
    expect(w!.reason).toBe('seats_taken');
    expect(w!.ahead).toBe(1);
    expect(w!.seats).toMatchObject({ max_parallel: 2, running: 2 });
    expect(w!.seats!.holders.map((h) => h.execution_id).sort()).toEqual(held.map((h) => h.id).sort());
    expect(w!.seats!.holders[0]).toMatchObject({
      lease_owner: 'worker-7',
      running_seconds: 90,
      lease_expires_at: new Date(Number(held[0]!.lease_expires_at)).toISOString(),
    });
    expect((await waitingOf(c.id))!.ahead).toBe(0);
    expect(w!.summary).toMatch(/All 2 seats are taken/);
  });

  it('no_worker when nobody claimed lately; next_in_line while a worker claims', async () => {
    const a = await submit('a');
    expect(await waitingOf(a.id)).toMatchObject({ reason: 'no_worker', last_claim_at: null });
    expect(await engine.claim(agent, { owner: 'w1' })).toHaveLength(1);
    const claimedAt = clock();
    const b = await submit('b');
    expect(await waitingOf(b.id)).toMatchObject({ reason: 'next_in_line', last_claim_at: new Date(claimedAt).toISOString() });
    clock.advance(NO_WORKER_AFTER_MS + 1_000);
    const w = await waitingOf(b.id);
    expect(w!.reason).toBe('no_worker');
    expect(w!.summary).toMatch(/no worker has claimed for this agent for 31 s/);
  });

  it('counts the queue ahead up to a cap', async () => {
    await engine.agents.update(agent, { max_parallel: 0, max_backlog: AHEAD_COUNT_CAP + 10 }, 'test');
    const base = { agent, trigger_kind: 'api' as const, origin: '{}', message: 'm', payload: 'null', priority: 0, run_after: null };
    await ts.store.transaction(async (tx) => {
      await ts.store.insertMany(
        tx,
        'executions',
        Array.from({ length: AHEAD_COUNT_CAP + 2 }, (_, i) => ({
          ...base,
          id: `ex_cap_${n}_${String(i).padStart(5, '0')}`,
          status: 'queued' as const,
          attempt: 0,
          max_redeliveries: 3,
          timeout_seconds: 600,
          lease_ttl_seconds: 30,
          created_at: clock() - 10_000 + i,
          queued_at: clock() - 10_000 + i,
          changed_at: clock(),
          changed_by: 'seed',
          change_reason: 'created',
        })) as any,
      );
    });
    const last = await submit('last');
    expect(await waitingOf(last.id)).toMatchObject({ reason: 'seats_taken', ahead: AHEAD_COUNT_CAP, ahead_capped: true });
    expect((await waitingOf(last.id))!.summary).toContain(`${AHEAD_COUNT_CAP}+ ahead`);
  });

  it('every reason in the closed list is covered above', () => {
    expect([...WAITING_REASONS].sort()).toEqual(
      [
        'agent_paused',
        'breaker_open', // test/engine/breaker.test.ts
        'budget_spent', // test/engine/budget.test.ts
        'key_busy', // test/engine/flow-keys.test.ts
        'key_throttled', // test/engine/flow-keys.test.ts
        'lapse_hold', // test/engine/lapse.test.ts
        'next_in_line',
        'no_worker',
        'push_failing',
        'run_after',
        'seats_taken',
        'serial_busy',
        'throttled', // test/engine/pools.test.ts
        'pool_full', // test/engine/pools.test.ts
        'pool_turn', // test/engine/pool-turns.test.ts
        'pool_throttled', // test/engine/pools.test.ts
        'pool_budget_spent', // test/engine/pools.test.ts
      ].sort(),
    );
  });
});

describe(`pause over HTTP, in trigger answers and in /metrics (${STORE_KIND})`, () => {
  const api = inProcessApi(() => engine);
  const { call } = api;

  it('pauses and resumes with 200 (idempotent), refuses bad input with a field-naming 400, and 404s an unknown agent', async () => {
    const p = await call('POST', `/v1/agents/${agent}/pause`, { reason: 'deploying' });
    expect(p.status).toBe(200);
    expect(p.body.paused).toEqual({ by: `key:${api.adminId}`, reason: 'deploying', since: new Date(clock()).toISOString() });
    clock.advance(1000);
    const again = await call('POST', `/v1/agents/${agent}/pause`, { reason: 'other' });
    expect(again.status).toBe(200);
    expect(again.body.paused).toEqual(p.body.paused);
    expect((await call('GET', `/v1/agents/${agent}`)).body.paused).toEqual(p.body.paused);
    const listed = (await call('GET', '/v1/agents')).body.agents.find((a: any) => a.name === agent);
    expect(listed.paused).toEqual(p.body.paused);

    const bad = await call('POST', `/v1/agents/${agent}/pause`, {});
    expect(bad.status).toBe(400);
    expect(bad.body.error).toBe('validation_error');
    expect(bad.body.message).toMatch(/reason/);
    expect((await call('POST', `/v1/agents/${agent}/pause`, { reason: '' })).status).toBe(400);
    expect((await call('POST', '/v1/agents/no-such-agent/pause', { reason: 'x' })).body.error).toBe('not_found');
    expect((await call('POST', `/v1/agents/${agent}/pause`, { reason: 'x' }, null)).status).toBe(401);

    const r = await call('POST', `/v1/agents/${agent}/resume`);
    expect(r.status).toBe(200);
    expect(r.body.paused).toBeNull();
    expect((await call('POST', `/v1/agents/${agent}/resume`)).status).toBe(200);
  });

  it('submit, schedule trigger and webhook delivery still create work and say the agent is paused', async () => {
    await call('POST', `/v1/agents/${agent}/pause`, { reason: 'quiet hours' });
    const sub = await call('POST', `/v1/agents/${agent}/executions`, { message: 'hi' });
    expect(sub.status).toBe(201);
    expect(sub.body).toMatchObject({ status: 'queued', agent_paused: true });
    // With an Idempotency-Key (the submit's transaction path) the stored answer says so too, and its replay.
    for (const replay of [false, true]) {
      const res = await api.app.inject({
        method: 'POST',
        url: `/v1/agents/${agent}/executions`,
        headers: { authorization: `Bearer ${api.admin}`, 'idempotency-key': 'paused-1' },
        payload: { message: 'keyed' },
      });
      expect(res.statusCode).toBe(201);
      expect(res.headers['idempotent-replay']).toBe(replay ? 'true' : undefined);
      expect(JSON.parse(res.body)).toMatchObject({ status: 'queued', agent_paused: true });
      if (replay) await engine.cancel(JSON.parse(res.body).execution_id, 'test'); // room in the backlog (4) for what follows
    }

    const s = await call('POST', `/v1/agents/${agent}/schedules`, { name: 'nightly', cron: '0 0 1 1 *', message: 'tick' });
    expect(s.status).toBe(201);
    const trig = await call('POST', `/v1/schedules/${s.body.id}/trigger`);
    expect(trig.status).toBe(201);
    expect(trig.body).toMatchObject({ status: 'queued', agent_paused: true });

    const h = await call('POST', '/v1/webhooks', { name: 'hook', agent });
    expect(h.status).toBe(201);
    const d = await call('POST', h.body.path, { event: 'x' }, null);
    expect(d.status).toBe(202);
    expect(d.body).toMatchObject({ status: 'queued', agent_paused: true });

    // The waiting answer over HTTP names the pause.
    const ex = await call('GET', `/v1/executions/${sub.body.execution_id}`);
    expect(ex.body.waiting).toMatchObject({ reason: 'agent_paused', paused: { reason: 'quiet hours' } });

    await call('POST', `/v1/agents/${agent}/resume`);
    const after = await call('POST', `/v1/agents/${agent}/executions`, { message: 'hi again' });
    expect(after.body.agent_paused).toBe(false);
  });

  it('/metrics shows baton_agent_paused per agent', async () => {
    await engine.agents.pause(agent, 'metrics', 'key:ops');
    const metrics = createNodeMetrics(engine);
    try {
      const body = (await metrics.render()).body;
      expect(body).toContain(`baton_agent_paused{agent="${agent}"} 1`);
      expect(body).toMatch(/baton_agent_paused\{agent="agent-1"\} 0/);
    } finally {
      metrics.close();
    }
  });
});
