import fc from 'fast-check';
import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AGENT_DELETE_CHUNK } from '../../src/engine/agents.ts';
import { Engine } from '../../src/engine/engine.ts';
import { newExecutionId } from '../../src/domain/ids.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { countTurns } from '../helpers/turns.ts';
import { refusal } from '../helpers/expect.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let n = 0;
let agent: string;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'test-node', cancelGraceMs: 30_000, backlogExpiryMs: 86_400_000 });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});
beforeEach(async () => {
  agent = `agent-${++n}`;
  await engine.agents.create({ name: agent, max_parallel: 2, max_backlog: 5, lease_ttl_seconds: 30, timeout_seconds: 600 }, 'test');
});

const claimOne = async (owner = 'w1') => {
  const [row] = await engine.claim(agent, { owner });
  return row!;
};

describe(`transitions (${STORE_KIND})`, () => {
  it('execution ids sort by their creation time, then by the order they were made, in JavaScript and in the store', async () => {
    const time = fc.integer({ min: 0, max: 2 ** 48 - 1 });
    fc.assert(
      fc.property(time, time, (a, b) => {
        const [x, y] = [newExecutionId(a), newExecutionId(b)];
        expect(x).toMatch(/^ex_[0-9a-v]{22}$/);
        // Made one after the other in the same millisecond, they keep that order (batch items, FIFO).
        if (a <= b) expect(x < y).toBe(true);
        if (a > b) expect(x > y).toBe(true);
      }),
    );
    // The store's own order (its collation) agrees: that is what keeps its indexes time-ordered.
    const start = Date.UTC(2026, 0, 1);
    const ids = Array.from({ length: 40 }, (_, i) => newExecutionId(start + i * 997 * (i % 3 ? 1 : 31)));
    const union = sql.join(
      ids.map((id) => sql`SELECT ${id} AS id`),
      sql` UNION ALL `,
    );
    const { rows } = await sql<{ id: string }>`SELECT id FROM (${union}) AS t ORDER BY id`.execute(ts.store.db);
    expect(rows.map((r) => r.id)).toEqual([...ids].sort());
    expect([...ids].sort()).toEqual(
      ids
        .map((id, i) => [id, start + i * 997 * (i % 3 ? 1 : 31)] as const)
        .sort((p, q) => p[1] - q[1])
        .map(([id]) => id),
    );
  });

  it('submit → queued with an event, then claim → running with a lease', async () => {
    const ex = await engine.submit(agent, { message: 'hello', payload: { a: 1 } }, 'key:test');
    expect(ex.status).toBe('queued');
    expect(ex.id).toMatch(/^ex_[A-Za-z0-9_-]{22}$/);
    const claimed = await claimOne();
    expect(claimed.id).toBe(ex.id);
    expect(claimed.status).toBe('running');
    expect(claimed.attempt).toBe(1);
    expect(claimed.lease_token).toBeTruthy();
    expect(claimed.lease_expires_at).toBe(clock() + 30_000);
    const { events } = await engine.getExecution(ex.id);
    expect(events.map((e) => [e.from_status, e.to_status])).toEqual([
      [null, 'queued'],
      ['queued', 'running'],
    ]);
    expect(events[1]!.seats_in_use).toBe(1);
    expect(events[1]!.seat_cap).toBe(2);
  });

  it('admits FIFO by (priority, queued_at, id) and never above the cap', async () => {
    const a = await engine.submit(agent, { message: 'a' }, 't');
    clock.advance(1);
    const b = await engine.submit(agent, { message: 'b', priority: -1 }, 't');
    clock.advance(1);
    const c = await engine.submit(agent, { message: 'c' }, 't');
    const got = await engine.claim(agent, { owner: 'w', max: 10 });
    expect(got.map((r) => r.id)).toEqual([b.id, a.id]);
    expect(await engine.claim(agent, { owner: 'w', max: 10 })).toEqual([]);
    await engine.complete(b.id, got[0]!.lease_token!, { status: 'succeeded' }, 'w');
    const next = await engine.claim(agent, { owner: 'w', max: 10 });
    expect(next.map((r) => r.id)).toEqual([c.id]);
  });

  it('does not admit run_after in the future', async () => {
    await engine.submit(agent, { message: 'later', run_after: clock() + 60_000 }, 't');
    expect(await engine.claim(agent, { owner: 'w' })).toEqual([]);
    clock.advance(60_000);
    expect(await engine.claim(agent, { owner: 'w' })).toHaveLength(1);
  });

  it('refuses a full backlog with backlog_full and writes nothing', async () => {
    for (let i = 0; i < 5; i++) await engine.submit(agent, { message: `m${i}` }, 't');
    const err = await refusal(engine.submit(agent, { message: 'one too many' }, 't'));
    expect(err.code).toBe('backlog_full');
    expect(await engine.listExecutions({ agent })).toHaveLength(5);
  });

  it('a pull claim on a push agent is wrong_delivery, and the reverse too', async () => {
    await engine.agents.create({ name: `${agent}-push`, delivery: 'push', push_url: 'http://127.0.0.1:9/' }, 'test');
    await engine.submit(`${agent}-push`, { message: 'x' }, 't');
    expect((await refusal(engine.claim(`${agent}-push`, { owner: 'w' }))).code).toBe('wrong_delivery');
    expect((await refusal(engine.claim(agent, { owner: 'node', delivery: 'push' }))).code).toBe('wrong_delivery');
    expect(await engine.claim(`${agent}-push`, { owner: 'node', delivery: 'push' })).toHaveLength(1);
  });

  it('refuses an unknown agent with not_found', async () => {
    expect((await refusal(engine.submit('nope', { message: 'x' }, 't'))).code).toBe('not_found');
    expect((await refusal(engine.claim('nope', { owner: 'w' }))).code).toBe('not_found');
  });

  it('heartbeat renews the lease; a wrong token is lease_lost and changes nothing', async () => {
    await engine.submit(agent, { message: 'x' }, 't');
    const row = await claimOne();
    clock.advance(10_000);
    const hb = await engine.heartbeat(row.id, row.lease_token!);
    expect(hb.lease_expires_at).toBe(clock() + 30_000);
    expect(hb.cancel_requested).toBe(false);
    expect((await refusal(engine.heartbeat(row.id, 'ls_wrong'))).code).toBe('lease_lost');
    expect((await refusal(engine.complete(row.id, 'ls_wrong', { status: 'succeeded' }, 'w'))).code).toBe('lease_lost');
    expect((await refusal(engine.release(row.id, 'ls_wrong', 'w'))).code).toBe('lease_lost');
    const { execution } = await engine.getExecution(row.id);
    expect(execution.status).toBe('running');
    expect(execution.lease_expires_at).toBe(hb.lease_expires_at);
  });

  it('complete records outcome, duration and usage; a second completion is refused', async () => {
    await engine.submit(agent, { message: 'x' }, 't');
    const row = await claimOne();
    clock.advance(1234);
    const done = await engine.complete(
      row.id,
      row.lease_token!,
      { status: 'failed', error: { code: 'boom', message: 'it broke' }, usage: { tokens: 5 } },
      'w',
    );
    expect(done.status).toBe('failed');
    expect(done.duration_ms).toBe(1234);
    expect(done.error_code).toBe('boom');
    const again = await refusal(engine.complete(row.id, row.lease_token!, { status: 'succeeded' }, 'w'));
    expect(again.code).toBe('lease_lost');
    expect((await engine.getExecution(row.id)).execution.status).toBe('failed');
  });

  it('a recognisable secret in a reported result or error is redacted before it is stored', async () => {
    await engine.submit(agent, { message: 'x' }, 't');
    const row = await claimOne();
    const secret = 'sk-' + 'a'.repeat(40);
    const done = await engine.complete(
      row.id,
      row.lease_token!,
      { status: 'failed', result: { out: `key ${secret}` }, error: { code: 'boom', message: `bad ${secret}` } },
      'w',
    );
    expect(done.result).not.toContain(secret);
    expect(done.error_message).not.toContain(secret);
    expect(JSON.parse(done.result!).out).toMatch(/^key /);
  });

  it('release hands the task back without charging an attempt', async () => {
    await engine.submit(agent, { message: 'x' }, 't');
    const row = await claimOne();
    const released = await engine.release(row.id, row.lease_token!, 'w');
    expect(released.status).toBe('queued');
    expect(released.attempt).toBe(0);
    const again = await claimOne('w2');
    expect(again.id).toBe(row.id);
    expect(again.attempt).toBe(1);
    expect(again.lease_token).not.toBe(row.lease_token);
  });

  it('cancel: queued at once; running on request, learned by heartbeat, forced after the grace', async () => {
    const q = await engine.submit(agent, { message: 'q' }, 't');
    clock.advance(1);
    const r = await engine.submit(agent, { message: 'r' }, 't');
    const [first] = await engine.claim(agent, { owner: 'w' });
    expect(first!.id).toBe(q.id);
    expect((await engine.cancel(r.id, 'u')).status).toBe('cancelled');
    const requested = await engine.cancel(q.id, 'u');
    expect(requested.status).toBe('running');
    expect(requested.cancel_requested_at).toBe(clock());
    expect((await engine.heartbeat(q.id, first!.lease_token!)).cancel_requested).toBe(true);
    // The worker keeps heartbeating but never stops: forced after the grace.
    clock.advance(20_000);
    await engine.heartbeat(q.id, first!.lease_token!);
    expect((await engine.reapOnce()).filter((x) => x.agent === agent)).toEqual([]);
    clock.advance(11_000);
    await engine.heartbeat(q.id, first!.lease_token!);
    const reaped = (await engine.reapOnce()).filter((x) => x.agent === agent);
    expect(reaped.map((x) => [x.id, x.kind])).toEqual([[q.id, 'cancel_forced']]);
    expect((await refusal(engine.complete(q.id, first!.lease_token!, { status: 'succeeded' }, 'w'))).code).toBe('lease_lost');
    expect((await engine.getExecution(q.id)).execution.status).toBe('cancelled');
  });

  it('a worker that was asked to cancel completes as cancelled', async () => {
    await engine.submit(agent, { message: 'x' }, 't');
    const row = await claimOne();
    await engine.cancel(row.id, 'u');
    const done = await engine.complete(row.id, row.lease_token!, { status: 'cancelled' }, 'w');
    expect(done.status).toBe('cancelled');
    expect(
      (await refusal(engine.cancel(row.id, 'u').then(() => engine.complete(row.id, row.lease_token!, { status: 'succeeded' }, 'w')))).code,
    ).toBe('lease_lost');
  });

  it('cancelling a terminal row other than cancelled is invalid_transition', async () => {
    await engine.submit(agent, { message: 'x' }, 't');
    const row = await claimOne();
    await engine.complete(row.id, row.lease_token!, { status: 'succeeded' }, 'w');
    expect((await refusal(engine.cancel(row.id, 'u'))).code).toBe('invalid_transition');
  });

  it('lowering max_parallel does not interrupt running work, only stops admissions', async () => {
    for (let i = 0; i < 3; i++) await engine.submit(agent, { message: `m${i}` }, 't');
    const running = await engine.claim(agent, { owner: 'w', max: 5 });
    expect(running).toHaveLength(2);
    await engine.agents.update(agent, { max_parallel: 1 }, 'u');
    await engine.heartbeat(running[0]!.id, running[0]!.lease_token!);
    await engine.complete(running[0]!.id, running[0]!.lease_token!, { status: 'succeeded' }, 'w');
    expect(await engine.claim(agent, { owner: 'w' })).toEqual([]); // still 1 running = cap
    await engine.complete(running[1]!.id, running[1]!.lease_token!, { status: 'succeeded' }, 'w');
    expect(await engine.claim(agent, { owner: 'w' })).toHaveLength(1);
  });

  it('deleting an agent cancels queued work and asks running work to stop', async () => {
    await engine.submit(agent, { message: 'a' }, 't');
    await engine.submit(agent, { message: 'b' }, 't');
    const row = await claimOne();
    const out = await engine.agents.delete(agent, 'u');
    expect(out).toEqual({ cancelled: 1, cancel_requested: 1 });
    expect((await engine.heartbeat(row.id, row.lease_token!)).cancel_requested).toBe(true);
    await expect(engine.agents.get(agent)).rejects.toThrow(/does not exist/);
  });

  it('deleting an agent with a deep backlog cancels it in chunks, each its own transaction, the event loop turning between', async () => {
    // On SQLite one transaction cancelling a deep backlog would hold the server for its length. Group
    // members are chunked too: a backlog of groups' members was cancelled in the final transaction.
    const deep = `deep-${++n}`;
    const joins = `deep-joins-${n}`;
    await engine.agents.create({ name: deep, max_parallel: 1, max_backlog: 5000 }, 'test');
    await engine.agents.create({ name: joins }, 'test');
    const members = AGENT_DELETE_CHUNK - 100;
    const plain = AGENT_DELETE_CHUNK * 2 + 3 - 2 * members;
    const member = (i: number) => ({ agent: deep, message: `g${i}` });
    // One group joins on another agent, one on the agent being deleted.
    const onOther = await engine.groups.create(
      { members: Array.from({ length: members }, (_, i) => member(i)), join: { agent: joins, message: 'j' } },
      't',
    );
    const onSelf = await engine.groups.create(
      { members: Array.from({ length: members }, (_, i) => member(i)), join: { agent: deep, message: 'j' } },
      't',
    );
    await engine.submitMany(
      deep,
      Array.from({ length: plain }, (_, i) => ({ message: `m${i}` })),
      't',
    );
    const queued = plain + 2 * members;
    const counter = countTurns();
    const transactions: number[] = [];
    const transaction = ts.store.transaction.bind(ts.store);
    ts.store.transaction = (fn) => (transactions.push(counter.turns), transaction(fn));
    try {
      expect(await engine.agents.delete(deep, 'u')).toEqual({ cancelled: queued, cancel_requested: 0 });
    } finally {
      counter.stop();
      ts.store.transaction = transaction;
    }
    // Three chunks (the last one short) and the final transaction, with the event loop free between them.
    expect(transactions).toHaveLength(4);
    for (let i = 1; i < transactions.length; i++) expect(transactions[i]!).toBeGreaterThan(transactions[i - 1]!);
    const left = await ts.store.db.selectFrom('executions').select('status').where('agent', '=', deep).execute();
    expect(left.map((r) => r.status)).toEqual(Array(queued).fill('cancelled'));
    const audit = await ts.store.db
      .selectFrom('audit_log')
      .select('detail')
      .where('action', '=', 'agent.delete')
      .where('subject', '=', deep)
      .execute();
    expect(JSON.parse(audit[0]!.detail!)).toMatchObject({ cancelled: queued, cancel_requested: 0 });
    // Both groups decided by the cancellations: the join on the other agent started, the one on this agent refused.
    const groups = await ts.store.db
      .selectFrom('execution_groups')
      .select(['id', 'status', 'join_refused', 'join_execution_id'])
      .where('id', 'in', [onOther.id, onSelf.id])
      .execute();
    const byId = new Map(groups.map((g) => [g.id, g]));
    expect(byId.get(onOther.id)).toMatchObject({ status: 'failed', join_refused: null });
    expect(byId.get(onOther.id)!.join_execution_id).not.toBeNull();
    expect(byId.get(onSelf.id)).toMatchObject({ status: 'failed', join_refused: 'agent_missing', join_execution_id: null });
  });

  it('the audit log and the event log refuse UPDATE and DELETE', async () => {
    await engine.submit(agent, { message: 'x' }, 't');
    await expect(ts.store.db.updateTable('audit_log').set({ action: 'forged' }).execute()).rejects.toThrow(/append-only/);
    await expect(ts.store.db.deleteFrom('audit_log').execute()).rejects.toThrow(/append-only/);
    await expect(ts.store.db.updateTable('execution_events').set({ reason: 'forged' }).execute()).rejects.toThrow(/append-only/);
    await expect(ts.store.db.deleteFrom('execution_events').execute()).rejects.toThrow(/append-only/);
  });

  it('the database refuses an unknown status and a running row without a lease', async () => {
    const ex = await engine.submit(agent, { message: 'x' }, 't');
    await expect(
      ts.store.db
        .updateTable('executions')
        .set({ status: 'exploded' as any })
        .where('id', '=', ex.id)
        .execute(),
    ).rejects.toThrow();
    await expect(ts.store.db.updateTable('executions').set({ status: 'running' }).where('id', '=', ex.id).execute()).rejects.toThrow();
  });
});
