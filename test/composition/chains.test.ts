import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHAIN_ALERT } from '../../src/domain/chains.ts';
import { CONFIG_PAGE, PREVIEW_CHARS } from '../../src/domain/lists.ts';
import { Engine } from '../../src/engine/engine.ts';
import { pruneOnce, type PruneCursor } from '../../src/retention/prune.ts';
import type { SubscriptionInput } from '../../src/engine/composition/subscriptions.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { inProcessApi } from '../helpers/api.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { agentMaker } from '../helpers/agents.ts';

// Chains: subscriptions start tasks in the transaction that ends their source. On the
// manual clock, on both stores.

let ts: TestStore;
let engine: Engine;
const clock = manualClock(Date.UTC(2026, 2, 1));
const DEPTH_LIMIT = 3;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({
    store: ts.store,
    clock,
    nodeId: 'chains-test',
    backlogExpiryMs: 30 * 86_400_000,
    alertSinks: ['webhook', 'slack'],
    chainDepthLimit: DEPTH_LIMIT,
  });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

const newAgent = agentMaker(() => engine, 'chain', { max_parallel: 5, max_backlog: 50, lease_ttl_seconds: 3600 });
const subscribe = (input: Partial<SubscriptionInput> & Pick<SubscriptionInput, 'source_agent' | 'target_agent'>) =>
  engine.subscriptions.create({ on: 'succeeded', message: 'after {{source.id}}', ...input }, 'test');

/** Claim the agent's next task and end it. */
async function finish(agent: string, status: 'succeeded' | 'failed', result?: unknown): Promise<ExecutionRow> {
  clock.advance(1);
  const [row] = await engine.claim(agent, { owner: 'w' });
  expect(row, `a task of ${agent} was admitted`).toBeDefined();
  return engine.complete(
    row!.id,
    row!.lease_token!,
    status === 'succeeded' ? { status, result } : { status, error: { code: 'boom', message: 'it broke' } },
    'w',
  );
}
const chainedOf = (sourceId: string) =>
  ts.store.db.selectFrom('executions').selectAll().where('caused_by', '=', sourceId).orderBy('id').execute();
const linksOf = (sourceId: string) => ts.store.db.selectFrom('chain_links').selectAll().where('source_id', '=', sourceId).execute();

describe(`chains (${STORE_KIND})`, () => {
  it('a succeeded source starts one task on the target, with provenance, rendered templates and an audit entry', async () => {
    const [coder, reviewer] = [await newAgent(), await newAgent()];
    const sub = await subscribe({
      source_agent: coder,
      target_agent: reviewer,
      message: 'review {{source.id}}: {{source.result#/title}}',
      payload: { pr: '{{source.result#/pr}}', from: '{{source.agent}}', asked: '{{source.payload}}' },
    });
    const src = await engine.submit(coder, { message: 'code', payload: { ticket: 7 } }, 'test');
    const done = await finish(coder, 'succeeded', { title: 'Fix it', pr: 42 });
    expect(done.status).toBe('succeeded');
    const [task, ...more] = await chainedOf(src.id);
    expect(more).toEqual([]);
    expect(task).toMatchObject({
      agent: reviewer,
      status: 'queued',
      trigger_kind: 'chain',
      caused_by: src.id,
      subscription_id: sub.id,
      chain_depth: 1,
      message: `review ${src.id}: Fix it`,
    });
    expect(JSON.parse(task!.payload)).toEqual({ pr: 42, from: coder, asked: { ticket: 7 } });
    expect(JSON.parse(task!.origin)).toEqual({
      chain: { source_id: src.id, subscription_id: sub.id, on: 'succeeded', filter: {}, source_status: 'succeeded', source_agent: coder },
    });
    const audit = await ts.store.db
      .selectFrom('audit_log')
      .selectAll()
      .where('action', '=', 'execution.create')
      .where('execution_id', '=', task!.id)
      .executeTakeFirstOrThrow();
    expect(JSON.parse(audit.detail!)).toEqual({ trigger: 'chain', caused_by: src.id, subscription_id: sub.id });
    const view = await engine.getExecution(src.id);
    expect(view.started).toEqual([{ subscription_id: sub.id, execution_id: task!.id, refused: null, at: clock() }]);
    // The chained task runs like any other, and its own success chains nothing (no subscription on the reviewer).
    const reviewed = await finish(reviewer, 'succeeded');
    expect(await chainedOf(reviewed.id)).toEqual([]);
  });

  it('without a payload template the task carries a summary of the source', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    await subscribe({ source_agent: a, target_agent: b, on: 'failed' });
    const src = await engine.submit(a, { message: 'x' }, 'test');
    await finish(a, 'failed');
    const [task] = await chainedOf(src.id);
    expect(JSON.parse(task!.payload)).toEqual({
      source: { id: src.id, agent: a, status: 'failed', error: { code: 'boom', message: 'it broke' }, result: null },
    });
  });

  // Every `on` against every final outcome: a task starts exactly when they match.
  const outcomes = ['succeeded', 'failed', 'cancelled'] as const;
  const ons = ['succeeded', 'failed', 'cancelled', 'any'] as const;
  const matrix = ons.flatMap((on) => outcomes.map((outcome) => ({ on, outcome, chains: on === 'any' || on === outcome })));
  it.each(matrix)('on=$on, source $outcome → chains: $chains', async ({ on, outcome, chains }) => {
    const [a, b] = [await newAgent(), await newAgent()];
    await subscribe({ source_agent: a, target_agent: b, on });
    const src = await engine.submit(a, { message: 'x' }, 'test');
    if (outcome === 'cancelled') await engine.cancel(src.id, 'test');
    else await finish(a, outcome);
    const tasks = await chainedOf(src.id);
    expect(tasks).toHaveLength(chains ? 1 : 0);
    if (chains) expect(JSON.parse(tasks[0]!.origin).chain).toMatchObject({ on, source_status: outcome });
    expect(await linksOf(src.id)).toHaveLength(chains ? 1 : 0);
  });

  it('filters: schedule_id matches runs of that schedule only; trigger matches the first run’s kind (retries included)', async () => {
    const [a, b] = [
      await newAgent({ retry_policy: { max_attempts: 2, base_seconds: 1, factor: 1, max_seconds: 1, jitter: 0 } }),
      await newAgent(),
    ];
    const s1 = await engine.schedules.create(a, { name: 's1', cron: '0 0 1 1 *', message: 'tick' }, 'test');
    const s2 = await engine.schedules.create(a, { name: 's2', cron: '0 0 1 1 *', message: 'tock' }, 'test');
    const bySchedule = await subscribe({ source_agent: a, target_agent: b, on: 'any', filter: { schedule_id: s1.id } });
    const byTrigger = await subscribe({ source_agent: a, target_agent: b, on: 'any', filter: { trigger: 'manual' } });
    const run1 = await engine.schedules.trigger(s1.id, { actor: 'test', trigger: 'manual', origin: {} });
    await finish(a, 'succeeded');
    expect((await chainedOf(run1.id)).map((t) => t.subscription_id).sort()).toEqual([bySchedule.id, byTrigger.id].sort());
    const run2 = await engine.schedules.trigger(s2.id, { actor: 'test', trigger: 'manual', origin: {} });
    await finish(a, 'succeeded');
    expect((await chainedOf(run2.id)).map((t) => t.subscription_id)).toEqual([byTrigger.id]);
    const api = await engine.submit(a, { message: 'x' }, 'test');
    await finish(a, 'succeeded');
    expect(await chainedOf(api.id)).toEqual([]);
    // A retried scheduled run: the retry (trigger 'retry') still counts as the schedule's manual run.
    await engine.schedules.trigger(s1.id, { actor: 'test', trigger: 'manual', origin: {} });
    const first = await finish(a, 'failed');
    expect(await chainedOf(first.id)).toEqual([]); // a retry follows: not final
    clock.advance(1_001);
    const last = await finish(a, 'failed');
    expect(last.trigger_kind).toBe('retry');
    expect((await chainedOf(last.id)).map((t) => t.subscription_id).sort()).toEqual([bySchedule.id, byTrigger.id].sort());
  });

  it('a disabled subscription starts nothing; re-enabled, later outcomes chain again', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    const sub = await subscribe({ source_agent: a, target_agent: b, enabled: false });
    const s1 = await engine.submit(a, { message: 'x' }, 'test');
    await finish(a, 'succeeded');
    expect(await chainedOf(s1.id)).toEqual([]);
    await engine.subscriptions.update(sub.id, { enabled: true }, 'test');
    const s2 = await engine.submit(a, { message: 'x' }, 'test');
    await finish(a, 'succeeded');
    expect(await chainedOf(s2.id)).toHaveLength(1);
  });

  it('retries: a failed source with retries left chains only on its last retry’s outcome', async () => {
    const a = await newAgent({ retry_policy: { max_attempts: 3, base_seconds: 1, factor: 1, max_seconds: 1, jitter: 0 } });
    const b = await newAgent();
    await subscribe({ source_agent: a, target_agent: b, on: 'any' });
    const src = await engine.submit(a, { message: 'flaky' }, 'test');
    const f1 = await finish(a, 'failed');
    clock.advance(1_001);
    const f2 = await finish(a, 'failed');
    clock.advance(1_001);
    const ok = await finish(a, 'succeeded');
    expect(f1.id).toBe(src.id);
    expect(await chainedOf(f1.id)).toEqual([]);
    expect(await chainedOf(f2.id)).toEqual([]);
    const [task] = await chainedOf(ok.id);
    expect(JSON.parse(task!.origin).chain).toMatchObject({ source_status: 'succeeded', source_id: ok.id });
    // The same with every attempt failing: one chain, from the last.
    const src2 = await engine.submit(a, { message: 'doomed' }, 'test');
    const g1 = await finish(a, 'failed');
    clock.advance(1_001);
    await finish(a, 'failed');
    clock.advance(1_001);
    const g3 = await finish(a, 'failed');
    expect(g1.id).toBe(src2.id);
    expect((await chainedOf(g3.id)).map((t) => JSON.parse(t.origin).chain.source_status)).toEqual(['failed']);
    expect(
      await ts.store.db.selectFrom('chain_links').select('source_id').where('source_id', 'in', [g1.id, f1.id, f2.id]).execute(),
    ).toEqual([]);
  });

  it("the reaper's timeout failure chains 'failed' in its transaction", async () => {
    const a = await newAgent({ timeout_seconds: 10 });
    const b = await newAgent();
    await subscribe({ source_agent: a, target_agent: b, on: 'failed', message: '{{source.error.code}}: {{source.error.message}}' });
    const src = await engine.submit(a, { message: 'hangs' }, 'test');
    await engine.claim(a, { owner: 'w' });
    clock.advance(11_000);
    const reaped = await engine.reapOnce();
    expect(reaped.find((r) => r.id === src.id)).toMatchObject({ to: 'failed' });
    const [task] = await chainedOf(src.id);
    expect(task).toMatchObject({ agent: b, status: 'queued' });
    expect(task!.message).toMatch(/^timeout: /);
  });

  it('following the same outcome twice creates nothing more (the link row is exactly-once)', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    await subscribe({ source_agent: a, target_agent: b });
    await engine.submit(a, { message: 'x' }, 'test');
    const done = await finish(a, 'succeeded');
    const again = await ts.store.transaction((tx) => engine.follow(tx, clock(), 'test', [done]));
    expect(again.created).toEqual([]);
    const twice = await ts.store.transaction(async (tx) => {
      const x = await engine.follow(tx, clock(), 'test', [done]);
      const y = await engine.follow(tx, clock(), 'test', [done]);
      return [...x.created, ...y.created];
    });
    expect(twice).toEqual([]);
    expect(await chainedOf(done.id)).toHaveLength(1);
    expect(await linksOf(done.id)).toHaveLength(1);
  });

  it('loops end at the depth limit: the refused link is recorded on the source, not dropped', async () => {
    const a = await newAgent();
    const sub = await subscribe({ source_agent: a, target_agent: a, message: 'again after {{source.id}}' });
    await engine.submit(a, { message: 'start' }, 'test');
    const depths: number[] = [];
    let last: ExecutionRow | undefined;
    for (let i = 0; i <= DEPTH_LIMIT; i++) {
      last = await finish(a, 'succeeded');
      depths.push(last.chain_depth);
    }
    expect(depths).toEqual([0, 1, 2, 3]);
    expect(await chainedOf(last!.id)).toEqual([]);
    expect(await linksOf(last!.id)).toEqual([
      { source_id: last!.id, subscription_id: sub.id, execution_id: null, refused: 'depth_limit', at: clock() },
    ]);
    expect((await engine.getExecution(last!.id)).started).toMatchObject([{ refused: 'depth_limit', execution_id: null }]);
    expect(await engine.claim(a, { owner: 'w' })).toEqual([]); // nothing more queued
    const refused = await ts.store.db
      .selectFrom('audit_log')
      .select('detail')
      .where('action', '=', 'execution.refused')
      .where('execution_id', '=', last!.id)
      .executeTakeFirstOrThrow();
    expect(JSON.parse(refused.detail!)).toMatchObject({
      error: 'depth_limit',
      caused_by: last!.id,
      subscription_id: sub.id,
      chain_depth: 4,
    });
  });

  it('a full target backlog is recorded (backlog_full) and alerted per sink; the source still succeeds', async () => {
    const a = await newAgent();
    const b = await newAgent({ max_backlog: 1 });
    const sub = await subscribe({ source_agent: a, target_agent: b });
    await engine.submit(b, { message: 'fills the backlog' }, 'test');
    const src = await engine.submit(a, { message: 'x' }, 'test');
    const done = await finish(a, 'succeeded');
    expect(done.status).toBe('succeeded');
    expect((await engine.getExecution(src.id)).execution.status).toBe('succeeded');
    expect(await chainedOf(src.id)).toEqual([]);
    expect(await linksOf(src.id)).toMatchObject([{ subscription_id: sub.id, execution_id: null, refused: 'backlog_full' }]);
    const alerts = await ts.store.db
      .selectFrom('canary_alerts')
      .select(['sink', 'body', 'status'])
      .where('invariant', '=', CHAIN_ALERT)
      .where('body', 'like', `%${src.id}%`)
      .orderBy('sink')
      .execute();
    expect(alerts.map((r) => r.sink)).toEqual(['slack', 'webhook']);
    expect(JSON.parse(alerts[1]!.body)).toMatchObject({
      event: 'chain.refused',
      refused: 'backlog_full',
      subscription_id: sub.id,
      source_id: src.id,
      target_agent: b,
    });
    expect(alerts.every((r) => r.status === 'pending')).toBe(true);
  });

  it('text that is no storable text (NUL, a lone surrogate) reaches a rendered message as U+FFFD; the source still ends', async () => {
    // On PostgreSQL the NUL made the insert fail: the source's completion (and its cancel) answered 500, for ever.
    const [src, dst] = [await newAgent(), await newAgent()];
    await subscribe({ source_agent: src, target_agent: dst, on: 'any', message: 'p={{source.payload}} r={{source.result}}' });
    const s = await engine.submit(src, { message: 'odd', payload: 'a\u0000b' }, 'test');
    const done = await finish(src, 'succeeded', 'c\ud800d\u0000');
    expect(done.status).toBe('succeeded');
    const [task] = await chainedOf(s.id);
    expect(task!.message).toBe('p=a\ufffdb r=c\ufffdd\ufffd');
    // Whole values in a payload keep their strings as they are (the JSON text escapes them).
    const cancelled = await engine.submit(src, { message: 'odd', payload: '\u0000' }, 'test');
    expect((await engine.cancel(cancelled.id, 'test')).status).toBe('cancelled');
    expect((await chainedOf(cancelled.id))[0]!.message).toBe('p=\ufffd r=');
  });

  it('an oversized rendering is refused as template_too_large; a vanished target as agent_missing', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    const big = await subscribe({ source_agent: a, target_agent: b, message: '{{source.result}}{{source.result}}' });
    const src = await engine.submit(a, { message: 'x' }, 'test');
    await finish(a, 'succeeded', 'y'.repeat(60_000));
    expect(await linksOf(src.id)).toMatchObject([{ subscription_id: big.id, refused: 'template_too_large', execution_id: null }]);
    expect(await chainedOf(src.id)).toEqual([]);
    await engine.subscriptions.delete(big.id, 'test');
    // A target gone without the engine's agent delete (which removes its subscriptions): the race it closes.
    const c = await newAgent();
    const sub = await subscribe({ source_agent: a, target_agent: c });
    await ts.store.db.deleteFrom('agents').where('name', '=', c).execute();
    const src2 = await engine.submit(a, { message: 'x' }, 'test');
    await finish(a, 'succeeded');
    expect(await linksOf(src2.id)).toMatchObject([{ subscription_id: sub.id, refused: 'agent_missing' }]);
  });

  it('deleting an agent deletes its subscriptions as source and target, in its transaction (audited count)', async () => {
    const [a, b, c] = [await newAgent(), await newAgent(), await newAgent()];
    await subscribe({ source_agent: a, target_agent: b });
    await subscribe({ source_agent: c, target_agent: a });
    const keep = await subscribe({ source_agent: b, target_agent: c });
    await subscribe({ source_agent: a, target_agent: a, on: 'cancelled' });
    await engine.submit(a, { message: 'queued, cancelled by the delete' }, 'test');
    await engine.agents.delete(a, 'test');
    expect(
      await ts.store.db
        .selectFrom('subscriptions')
        .select('id')
        .where((eb) => eb.or([eb('source_agent', '=', a), eb('target_agent', '=', a)]))
        .execute(),
    ).toEqual([]);
    expect((await engine.subscriptions.get(keep.id)).id).toBe(keep.id);
    const audit = await ts.store.db
      .selectFrom('audit_log')
      .select('detail')
      .where('action', '=', 'agent.delete')
      .where('subject', '=', a)
      .executeTakeFirstOrThrow();
    expect(JSON.parse(audit.detail!)).toMatchObject({ cancelled: 1, subscriptions_deleted: 3 });
    // Nothing chained onto the deleted agent from its own cancelled work.
    expect(await ts.store.db.selectFrom('executions').select('id').where('agent', '=', a).where('status', '=', 'queued').execute()).toEqual(
      [],
    );
  });

  it('retention removes a source with its links; the chained task it keeps names the pruned source in caused_by', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    await subscribe({ source_agent: a, target_agent: b });
    const src = await engine.submit(a, { message: 'old' }, 'test');
    await finish(a, 'succeeded');
    const [task] = await chainedOf(src.id);
    const settings = { retentionDays: 1, auditRetentionDays: 0 };
    for (let cursor: PruneCursor | undefined, i = 0; i < 100; i++) {
      const batch = await pruneOnce({ store: ts.store, settings, now: clock() + 2 * 86_400_000, cursor });
      await batch.prefetched;
      if (batch.next.phase === 'done') break;
      cursor = batch.next;
    }
    expect(await ts.store.db.selectFrom('executions').select('id').where('id', '=', src.id).execute()).toEqual([]);
    expect(await linksOf(src.id)).toEqual([]);
    // The chained task is still queued (live work is never pruned) and keeps its dangling caused_by.
    expect((await engine.getExecution(task!.id)).execution).toMatchObject({ status: 'queued', caused_by: src.id });
  });

  it('every create, update and delete is audited', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    const sub = await subscribe({ source_agent: a, target_agent: b });
    await engine.subscriptions.update(sub.id, { on: 'any', filter: { trigger: 'api' } }, 'test');
    await engine.subscriptions.delete(sub.id, 'test');
    const rows = await ts.store.db
      .selectFrom('audit_log')
      .select(['action', 'detail'])
      .where('subject', '=', sub.id)
      .orderBy('id')
      .execute();
    expect(rows.map((r) => r.action)).toEqual(['subscription.create', 'subscription.update', 'subscription.delete']);
    expect(JSON.parse(rows[1]!.detail!)).toEqual({ fields: ['on', 'filter'] });
  });
});

describe(`subscriptions over HTTP (${STORE_KIND})`, () => {
  const api = inProcessApi(() => engine);
  const { call } = api;
  let workerKey: string;
  let a: string;
  let b: string;
  beforeAll(async () => {
    [a, b] = [await newAgent(), await newAgent()];
    workerKey = (await api.keys.create({ name: 'w', scope: 'agent', agent: a }, 'test')).key;
  });

  it('create, list, show, update, delete; the source execution lists what it started', async () => {
    const c = await call('POST', '/v1/subscriptions', {
      source_agent: a,
      target_agent: b,
      on: 'succeeded',
      filter: { trigger: 'api' },
      message: 'review {{source.id}}',
      payload: { r: '{{source.result}}' },
    });
    expect(c.status).toBe(201);
    expect(c.body).toMatchObject({
      source_agent: a,
      target_agent: b,
      on: 'succeeded',
      filter: { trigger: 'api' },
      enabled: true,
      payload: { r: '{{source.result}}' },
    });
    const id = c.body.id as string;
    expect((await call('GET', `/v1/subscriptions/${id}`)).body).toEqual(c.body);
    expect((await call('GET', `/v1/subscriptions?agent=${b}`)).body.subscriptions.map((s: { id: string }) => s.id)).toEqual([id]);
    expect((await call('GET', `/v1/subscriptions?source=${b}`)).body.subscriptions).toEqual([]);
    const p = await call('PATCH', `/v1/subscriptions/${id}`, { filter: null, payload: null });
    expect(p.status).toBe(200);
    expect(p.body).toMatchObject({ filter: {}, payload: null });
    const s = await call('POST', `/v1/agents/${a}/executions`, { message: 'x' });
    await finish(a, 'succeeded', 1);
    const view = await call('GET', `/v1/executions/${s.body.execution_id}`);
    expect(view.status).toBe(200);
    expect(view.body.started).toEqual([
      { subscription_id: id, execution_id: expect.any(String), refused: null, at: new Date(clock()).toISOString() },
    ]);
    const chained = await call('GET', `/v1/executions/${view.body.started[0].execution_id}`);
    expect(chained.body).toMatchObject({ caused_by: s.body.execution_id, subscription_id: id, chain_depth: 1, trigger: 'chain' });
    expect((await call('DELETE', `/v1/subscriptions/${id}`)).body).toEqual({ deleted: id });
    expect((await call('GET', `/v1/subscriptions/${id}`)).status).toBe(404);
  });

  const valid = () => ({ source_agent: a, target_agent: b, on: 'succeeded', message: 'm' });
  const refusals: Array<[string, () => unknown, number, string, RegExp]> = [
    ['unknown source agent', () => ({ ...valid(), source_agent: 'nobody-here' }), 404, 'not_found', /agent 'nobody-here'/],
    ['unknown target agent', () => ({ ...valid(), target_agent: 'nobody-there' }), 404, 'not_found', /agent 'nobody-there'/],
    ['bad on', () => ({ ...valid(), on: 'done' }), 400, 'validation_error', /on/],
    [
      'unknown placeholder in the message',
      () => ({ ...valid(), message: 'x {{source.nope}}' }),
      400,
      'validation_error',
      /^body\.message: placeholder/,
    ],
    [
      'unknown placeholder in the payload',
      () => ({ ...valid(), payload: { a: ['{{target.id}}'] } }),
      400,
      'validation_error',
      /^body\.payload\.a\[0\]: placeholder/,
    ],
    [
      'schedule of another agent',
      () => ({ ...valid(), filter: { schedule_id: 'sc_none' } }),
      400,
      'validation_error',
      /^body\.filter\.schedule_id/,
    ],
    ['bad trigger filter', () => ({ ...valid(), filter: { trigger: 'cron' } }), 400, 'validation_error', /filter/],
    ['unknown field', () => ({ ...valid(), extra: 1 }), 400, 'validation_error', /extra/],
    ['empty message', () => ({ ...valid(), message: '' }), 400, 'validation_error', /message/],
  ];
  it.each(refusals)('POST refuses %s', async (_name, body, status, error, message) => {
    const r = await call('POST', '/v1/subscriptions', body());
    expect(r.status).toBe(status);
    expect(r.body.error).toBe(error);
    expect(r.body.message).toMatch(message);
  });

  it('lists page oldest first with a cursor, by source, target or either; items carry previews, the single read has the templates whole', async () => {
    const [x, y, z] = [await newAgent(), await newAgent(), await newAgent()];
    // Every subscription below shares one created_at (the manual clock): the id orders them.
    const made: string[] = [];
    const big = { message: 'm'.repeat(5_000) + ' {{source.id}}', payload: { blob: 'p'.repeat(50_000) } };
    made.push((await subscribe({ source_agent: x, target_agent: y, ...big })).id);
    for (const [source, target] of [
      [y, x],
      [x, x],
      [z, y],
      [x, z],
      [z, x],
    ] as const)
      made.push((await subscribe({ source_agent: source, target_agent: target })).id);
    const walk = async (query: string, limit: number) => {
      const ids: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const page: { status: number; body: any } = await call(
          'GET',
          `/v1/subscriptions?${query}&limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`,
        );
        expect(page.status).toBe(200);
        expect(page.body.subscriptions.length).toBeLessThanOrEqual(limit);
        ids.push(...page.body.subscriptions.map((s: { id: string }) => s.id));
        cursor = page.body.next_cursor;
        pages++;
      } while (cursor);
      return { ids, pages };
    };
    const inOrder = [...made].sort();
    const of = (keep: (i: number) => boolean) => inOrder.filter((id) => keep(made.indexOf(id)));
    // x as source or target: all but z → y; a subscription of x to itself once.
    expect(await walk(`agent=${x}`, 2)).toEqual({ ids: of((i) => i !== 3), pages: 3 });
    expect((await walk(`source=${x}`, 1)).ids).toEqual(of((i) => [0, 2, 4].includes(i)));
    expect((await walk(`target=${x}`, 2)).ids).toEqual(of((i) => [1, 2, 5].includes(i)));
    expect((await walk(`agent=${x}&source=${z}`, 1)).ids).toEqual(of((i) => i === 5));
    expect((await walk(`agent=${x}&target=${y}`, 5)).ids).toEqual(of((i) => i === 0));
    expect((await walk(`agent=${y}&source=${x}&target=${y}`, 5)).ids).toEqual(of((i) => i === 0));
    const page = await call('GET', `/v1/subscriptions?source=${x}&target=${y}`);
    const item = page.body.subscriptions[0];
    expect(item).not.toHaveProperty('payload');
    expect(item.message).toBe('m'.repeat(PREVIEW_CHARS) + '…');
    expect(item.payload_preview).toBe(`{"blob":"${'p'.repeat(PREVIEW_CHARS - 9)}…`);
    expect(page.body.next_cursor).toBeNull();
    expect((await call('GET', `/v1/subscriptions/${item.id}`)).body).toMatchObject(big);
    // Out of bounds or not ours: 400 naming the field.
    for (const q of [
      'limit=0',
      `limit=${CONFIG_PAGE.max + 1}`,
      'cursor=not-a-cursor',
      `cursor=${Buffer.from('[1,2]').toString('base64url')}`,
    ]) {
      const r = await call('GET', `/v1/subscriptions?${q}`);
      expect({ status: r.status, error: r.body.error }).toEqual({ status: 400, error: 'validation_error' });
      expect(r.body.message).toMatch(/querystring\.(limit|cursor)/);
    }
  });

  it('unknown ids and agents are 404; an agent-scoped key is 403', async () => {
    expect((await call('PATCH', '/v1/subscriptions/su_nope', { enabled: false })).body.error).toBe('not_found');
    expect((await call('DELETE', '/v1/subscriptions/su_nope')).status).toBe(404);
    expect((await call('GET', '/v1/subscriptions?agent=nobody')).status).toBe(404);
    const r = await call('POST', '/v1/subscriptions', valid(), workerKey);
    expect(r.status).toBe(403);
    expect((await call('GET', '/v1/subscriptions', undefined, workerKey)).status).toBe(403);
    expect((await call('PATCH', '/v1/subscriptions/su_x', { message: '{{nope}}' })).status).toBe(400);
  });
});
