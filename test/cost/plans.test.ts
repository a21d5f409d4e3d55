import { CompiledQuery, sql } from 'kysely';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readEvidence } from '../../src/canary/evidence.ts';
import { runCanaryOnce } from '../../src/canary/run.ts';
import { Dispatcher } from '../../src/delivery/dispatcher.ts';
import { countFinished } from '../../src/engine/agent-activity.ts';
import { Engine } from '../../src/engine/engine.ts';
import { appendLogs, readLogs } from '../../src/engine/logs.ts';
import { tickSchedulesOnce } from '../../src/engine/triggers/scheduler.ts';
import { runInFlight } from '../../src/engine/triggers/start-run.ts';
import { createNodeMetrics } from '../../src/metrics.ts';
import { exportHistory } from '../../src/retention/export.ts';
import { pruneOnce } from '../../src/retention/prune.ts';
import { readHistoryStats } from '../../src/retention/stats.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import type { NewExecution } from '../../src/store/schema.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import {
  compiledOf,
  during,
  expectPlansSeek,
  HISTORY_TABLES,
  nestedPlans,
  planOf,
  planStore,
  recorded,
  recordingStore,
} from './plans-check.ts';

// Cost independent of history: a store is meant to run for years without its hot paths slowing
// as executions pile up, so every query the hot paths make is served by an
// index made for its shape. The store is seeded with enough terminal history for the planners
// to care (skewed like real history, and analysed, so they see it); then the real functions run
// against a recording store (a Kysely plugin keeps every statement they send), and the plan of
// every statement that touches a history table is checked:
// - SQLite (EXPLAIN QUERY PLAN): no SCAN of a history table, except of a partial index holding
//   only live rows, or an ordered walk (an index or the rowid) stopped by a LIMIT with no filter
//   (the unfiltered first page, the oldest row); no temp B-tree sorting rows found through a
//   history index; a cursor (created_at <) is a range inside the index, not a filter.
// - PostgreSQL (EXPLAIN): no Seq Scan of a history table; no full walk of a history index
//   unless it is such an ordered walk; no scan of history expected to return a large share of
//   it unless a Limit above it stops it; the cursor is an Index Cond.
// The second test proves the check is not vacuous: the statements that used to scan fail it.

const HISTORY = 30_000;
const AGENTS = ['hist-a', 'hist-b', 'hist-c', 'hist-d', 'hist-e'];

let ts: TestStore;
let store: StoreAdapter;
let engine: Engine;
const now = Date.now();

// ── seeding ─────────────────────────────────────────────────────────────────

const scheduleIds: string[] = [];
let webhookId = '';
let sampleId = '';
let loggedId = '';

function historyRow(i: number): NewExecution {
  // Skewed like real history: one busy agent (80 %) and quiet ones (5 % each); most runs
  // succeed. Filters below ask for the rare values, where a walk instead of a seek costs most.
  const k = i % 20;
  const agent = AGENTS[k < 16 ? 0 : k - 15]!;
  // A schedule is a small share of history, as among many agents (each of the two: 1 row in 24).
  const scheduled = i % 12 === 0;
  const r = Math.floor(i / 20) % 100;
  const status = scheduled && r === 99 ? 'skipped' : r < 94 ? 'succeeded' : r < 97 ? 'failed' : 'cancelled';
  const created = now - 30 * 86_400_000 + i * 60_000;
  const started = status === 'skipped' ? null : created + 1000;
  return {
    id: `ex_hist_${String(i).padStart(7, '0')}`,
    agent,
    schedule_id: scheduled ? scheduleIds[i % scheduleIds.length]! : null,
    scheduled_for: scheduled ? created : null,
    trigger_kind: scheduled ? 'schedule' : 'api',
    origin: '{}',
    message: `history task ${i}`,
    payload: JSON.stringify({ n: i }),
    priority: 0,
    run_after: null,
    status,
    attempt: status === 'skipped' ? 0 : 1,
    max_redeliveries: 3,
    timeout_seconds: 600,
    lease_ttl_seconds: 30,
    lease_owner: status === 'skipped' ? null : 'w',
    lease_token: status === 'skipped' ? null : `tok_${i}`,
    lease_expires_at: null,
    heartbeat_at: started,
    deadline_at: null,
    cancel_requested_at: null,
    created_at: created,
    queued_at: status === 'skipped' ? null : created,
    started_at: started,
    completed_at: created + 5000,
    duration_ms: started === null ? null : 4000,
    result: status === 'succeeded' ? JSON.stringify({ ok: i }) : null,
    error_code:
      status === 'failed' ? 'boom' : status === 'cancelled' ? 'cancelled_by_user' : status === 'skipped' ? 'already_running' : null,
    error_message: status === 'failed' ? 'it broke' : null,
    usage: null,
    retry_of: null,
    idempotency_key: null,
    webhook_id: i % 7 === 0 && webhookId ? webhookId : null,
    changed_at: created + 5000,
    changed_by: 'seed',
    change_reason: status,
  } as NewExecution;
}

async function seed(): Promise<void> {
  for (const a of AGENTS) await engine.agents.create({ name: a, max_parallel: 2, max_backlog: 1000 }, 'seed');
  await engine.agents.create({ name: 'hist-push', max_parallel: 1, delivery: 'push', push_url: 'http://127.0.0.1:9/' }, 'seed');
  const t = engine;
  for (const a of AGENTS.slice(0, 2)) {
    const s = await t.schedules.create(a, { name: `every-minute-${a}`, cron: '* * * * *', message: 'tick' }, 'seed');
    scheduleIds.push(s.id);
  }
  webhookId = (await t.webhooks.create({ name: 'hook', agent: AGENTS[2]! }, 'seed')).row.id;
  const chunk = 2000;
  for (let i = 0; i < HISTORY; i += chunk) {
    const rows = Array.from({ length: Math.min(chunk, HISTORY - i) }, (_, j) => historyRow(i + j));
    await store.transaction(async (tx) => {
      await store.insertMany(tx, 'executions', rows);
      await store.insertMany(
        tx,
        'audit_log',
        rows.map((r) => ({
          at: r.created_at,
          actor: 'seed',
          action: 'execution.create',
          subject: r.agent,
          execution_id: r.id,
          detail: null,
        })),
      );
    });
  }
  sampleId = historyRow(HISTORY - 10).id;
  // Logs: 20 lines each for 500 executions.
  loggedId = historyRow(HISTORY - 20).id;
  await store.transaction(async (tx) => {
    for (let i = 0; i < 500; i++) {
      const id = historyRow(HISTORY - 1 - i).id;
      await tx
        .insertInto('execution_logs')
        .values(
          Array.from({ length: 20 }, (_, s) => ({ execution_id: id, seq: s + 1, at: now, stream: 'stdout' as const, line: `line ${s}` })),
        )
        .execute();
      await tx.insertInto('execution_log_heads').values({ execution_id: id, lines: 20, bytes: 200, truncated: 0 }).execute();
    }
  });
  if (store.kind === 'sqlite') await sql`ANALYZE`.execute(store.db);
  else
    for (const table of [...HISTORY_TABLES, 'agents', 'schedules', 'webhooks', 'idempotency_keys'])
      await sql.raw(`VACUUM ANALYZE ${table}`).execute(store.db);
}

// ── the canary ──────────────────────────────────────────────────────────────

/**
 * One canary cycle, recorded, as the timer runs it once it follows the event log: caught up
 * first (unrecorded: a first cycle reads the seed's events in chunks), then new activity (a
 * cancellation, the group and the chain above) and open violations on old rows of history, so
 * that the rechecks run too.
 */
async function canaryCycle(groupId: string, chainSourceId: string): Promise<void> {
  for (let i = 0; i < 100; i++) if ((await runCanaryOnce({ store, clock: () => now })).events?.caught_up) break;
  const cancelled = await engine.submit(AGENTS[2]!, { message: 'cancel me' }, 'test');
  await engine.cancel(cancelled.id, 'test');
  const old = [historyRow(100), historyRow(200), historyRow(300)];
  const planted = (invariant: string, subject: string, agent: string | null) => ({
    invariant,
    subject,
    agent,
    tier: 'A' as const,
    severity: 'warning' as const,
    reason: 'planted',
    detail: null,
    first_seen: now,
    last_seen: now,
  });
  await store.db
    .insertInto('canary_violations')
    .values([
      planted('E-02', old[0]!.id!, old[0]!.agent!),
      planted('E-03', old[1]!.id!, old[1]!.agent!),
      planted('E-08', old[2]!.id!, old[2]!.agent!),
      planted('S-02', old[0]!.id!, old[0]!.agent!),
      planted('G-04', old[1]!.id!, old[1]!.agent!),
      planted('C-02', chainSourceId, null),
      planted('C-01', groupId, null),
    ])
    .execute();
  await during('canary cycle', () => runCanaryOnce({ store: engine.store, clock: () => now + 1 }));
}

// ── the test ────────────────────────────────────────────────────────────────

beforeAll(async () => {
  ts = await openTestStore();
  store = ts.store;
  planStore(ts);
  engine = new Engine({ store: recordingStore(store), nodeId: 'plans', clock: () => now });
  await seed();
}, 120_000);
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

describe(`query plans over ${HISTORY.toLocaleString('en')} executions of history (${STORE_KIND})`, () => {
  it('every hot query seeks instead of scanning history', async () => {
    const [a, b] = AGENTS as [string, string];
    // Live work: a few queued and running rows among the history.
    const live: Array<{ id: string }> = [];
    for (let i = 0; i < 6; i++) live.push(await engine.submit(AGENTS[i % 3]!, { message: `live ${i}`, payload: { i } }, 'test'));
    await engine.submit('hist-push', { message: 'push me' }, 'test');

    await during('listAgents', () => engine.agents.list({ limit: 200 }));
    await during('listAgents after a cursor', () => engine.agents.list({ limit: 200, after: a }));
    await during('getAgent', () => engine.agents.get(a));
    const claimed = await during('claim', () => engine.claim(a, { owner: 'w1', max: 2 }));
    expect(claimed.length).toBeGreaterThan(0);
    await during('heartbeat', () => engine.heartbeat(claimed[0]!.id, claimed[0]!.lease_token!));
    await during('logs append', () =>
      appendLogs(engine.store, claimed[0]!.id, claimed[0]!.lease_token!, [{ stream: 'stdout', line: 'hi' }], now),
    );
    await during('complete', () =>
      engine.complete(claimed[0]!.id, claimed[0]!.lease_token!, { status: 'succeeded', result: { ok: true } }, 'w1'),
    );
    if (claimed[1])
      await during('complete failed', () =>
        engine.complete(claimed[1]!.id, claimed[1]!.lease_token!, { status: 'failed', error: { code: 'x', message: 'y' } }, 'w1'),
      );
    // Completions asked for in one turn: one statement for all of them on PostgreSQL (gather.ts).
    for (const agent of [AGENTS[3]!, AGENTS[4]!]) for (let i = 0; i < 2; i++) await engine.submit(agent, { message: `many ${i}` }, 'test');
    const many = [
      ...(await engine.claim(AGENTS[3]!, { owner: 'w4', max: 2 })),
      ...(await engine.claim(AGENTS[4]!, { owner: 'w4', max: 2 })),
    ];
    expect(many).toHaveLength(4);
    await during('complete many', () => Promise.all(many.map((r) => engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'w4'))));
    // Plain submits asked for in one turn: one call of baton_submit_many on PostgreSQL (gather.ts).
    await during('plain submits together', () =>
      Promise.all([AGENTS[3]!, AGENTS[4]!, AGENTS[3]!].map((agent, i) => engine.submit(agent, { message: `together ${i}` }, 'test'))),
    );
    const [again] = await engine.claim(AGENTS[1]!, { owner: 'w2' });
    if (again) await during('release', () => engine.release(again.id, again.lease_token!, 'w2'));
    await during('cancel', () => engine.cancel(live[5]!.id, 'test'));

    // Why is it waiting: a queued row behind full seats (the seat holders, its place in the
    // queue), and one of a paused agent.
    const c = AGENTS[2]!;
    const queuedC: Array<{ id: string }> = [];
    for (let i = 0; i < 4; i++) queuedC.push(await engine.submit(c, { message: `seat ${i}` }, 'test'));
    await engine.claim(c, { owner: 'w3', max: 2 });
    await during('waiting seats', () => engine.getExecution(queuedC[3]!.id));
    await engine.agents.pause(AGENTS[3]!, 'plans', 'test');
    const pausedRow = await engine.submit(AGENTS[3]!, { message: 'paused' }, 'test');
    await during('waiting paused', () => engine.getExecution(pausedRow.id));

    const filters: Array<[string, Parameters<Engine['listExecutions']>[0]]> = [
      ['list', {}],
      ['list agent', { agent: b }],
      ['list status queued', { status: ['queued'] }],
      ['list status failed', { status: ['failed'] }],
      ['list status queued,running', { status: ['queued', 'running'] }],
      ['list agent+status failed', { agent: b, status: ['failed'] }],
      ['list agent+status queued,running', { agent: b, status: ['queued', 'running'] }],
      ['list schedule', { schedule_id: scheduleIds[0]! }],
      ['list schedule+status skipped', { schedule_id: scheduleIds[0]!, status: ['skipped'] }],
      ['list schedule+status queued', { schedule_id: scheduleIds[0]!, status: ['queued'] }],
      ['list since/until', { created_after: now - 10 * 86_400_000, created_before: now - 9 * 86_400_000 }],
      ['list agent since', { agent: b, created_after: now - 86_400_000 }],
      ['list deep cursor', { before: { created_at: now - 25 * 86_400_000, id: 'ex_zzz' } }],
      ['list agent deep cursor', { agent: b, before: { created_at: now - 25 * 86_400_000, id: 'ex_zzz' } }],
      ['list status deep cursor', { status: ['succeeded'], before: { created_at: now - 25 * 86_400_000, id: 'ex_zzz' } }],
      [
        'list agent+status deep cursor',
        { agent: b, status: ['failed', 'cancelled'], before: { created_at: now - 25 * 86_400_000, id: 'ex_zzz' } },
      ],
    ];
    for (const [what, f] of filters) await during(what, () => engine.listExecutions({ limit: 50, ...f }));
    await during('getExecution', () => engine.getExecution(sampleId));
    // The dashboard's charts: the busy agent (80 % of history) over its longest window.
    await during('agent series', () => engine.agents.series(AGENTS[0]!, '24h'));
    await during('agent seats', () => engine.agents.seats(AGENTS[0]!, '6h'));
    // (What a series adds for an agent busier than its row cap: exact counts per bucket.)
    await during('agent series counts', () => countFinished(engine.store.reader, AGENTS[0]!, now - 30 * 86_400_000, 12 * 3_600_000));
    await during('manual retry', () => engine.retryFailed(claimed[1]?.id ?? 'ex_none', 'test').catch(() => undefined));
    await during('logs read', () => readLogs(engine.store, loggedId, { after: 5, limit: 100 }));

    const t = engine;
    await during('schedule trigger', () =>
      t.schedules.trigger(scheduleIds[1]!, { actor: 'test', trigger: 'manual', origin: {} }).catch(() => undefined),
    );
    await during('webhook overlap', () => engine.store.transaction((tx) => runInFlight(tx, { scheduleId: null, webhookId })));
    await store.db
      .updateTable('schedules')
      .set({ next_run_at: now - 1000 })
      .execute();
    await during('scheduler pass', () => tickSchedulesOnce(engine, { now }));
    await during('reaper pass', () => engine.reapOnce());

    const dispatcher = new Dispatcher(engine, { concurrency: 2 });
    try {
      await during('dispatcher pass', async () => {
        await dispatcher.dispatchOnce();
        for (let i = 0; i < 200 && dispatcher.active > 0; i++) await new Promise((r) => setTimeout(r, 25));
      });
    } finally {
      await dispatcher.stop();
    }
    // The push agent's last delivery failed (nothing listens on port 9): the next one waits on it.
    const pushNext = await engine.submit('hist-push', { message: 'push again' }, 'test');
    await during('waiting push', () => engine.getExecution(pushNext.id));

    const metrics = createNodeMetrics(engine);
    try {
      const body = await during('metrics', () => metrics.render().then((r) => r.body));
      expect(body).toMatch(/baton_store_up 1/);
    } finally {
      metrics.close();
    }

    await during('schedule delete', () => t.schedules.delete(scheduleIds[1]!, 'test'));
    await during('agent delete', () => engine.agents.delete(AGENTS[4]!, 'test'));

    // Budgets: an agent with years of hourly ledger rows behind it. Admission, completion, the
    // waiting answer and GET /v1/agents/{agent}/budget each seek its current windows' rows.
    await engine.agents.create(
      {
        name: 'hist-budget',
        max_parallel: 1,
        budget: {
          time_zone: 'Europe/Berlin',
          limits: [
            { metric: 'cost_usd', window: 'hour', limit: 1e6 },
            { metric: 'total_tokens', window: 'month', limit: 1 },
          ],
        },
      },
      'seed',
    );
    for (let c = 0; c < 20; c++)
      await store.db
        .insertInto('agent_budget_ledger')
        .values(
          Array.from({ length: 1000 }, (_, i) => ({
            agent: 'hist-budget',
            window_kind: 'hour' as const,
            window_start: now - (c * 1000 + i + 10) * 3_600_000,
            updated_at: now,
          })),
        )
        .execute();
    if (store.kind === 'sqlite') await sql`ANALYZE`.execute(store.db);
    else await sql`VACUUM ANALYZE agent_budget_ledger`.execute(store.db);
    const budgetRows = [
      await engine.submit('hist-budget', { message: 'b1' }, 'test'),
      await engine.submit('hist-budget', { message: 'b2' }, 'test'),
    ];
    const [spender] = await during('claim budget', () => engine.claim('hist-budget', { owner: 'w4' }));
    await during('complete budget', () =>
      engine.complete(spender!.id, spender!.lease_token!, { status: 'succeeded', usage: { cost_usd: 1, total_tokens: 5 } }, 'w4'),
    );
    expect(await during('claim budget spent', () => engine.claim('hist-budget', { owner: 'w4' }))).toEqual([]);
    expect(
      (await during('waiting budget', () => engine.getExecution(budgetRows.find((r) => r.id !== spender!.id)!.id))).waiting?.reason,
    ).toBe('budget_spent');
    await during('budget read', () => engine.agents.budget('hist-budget'));

    // Shared-cause lapse: two leases of one agent lapse in one pass (the reaper's hold lookup and
    // agent update), then the waiting answer on the held agent and the claim that ends the hold.
    await engine.agents.create({ name: 'hist-lapse', max_parallel: 3, max_backlog: 10 }, 'test');
    for (let i = 0; i < 3; i++) await engine.submit('hist-lapse', { message: `lapse ${i}` }, 'test');
    const leased = await engine.claim('hist-lapse', { owner: 'w5', max: 2 });
    await store.db
      .updateTable('executions')
      .set({ lease_expires_at: now - 1 })
      .where(
        'id',
        'in',
        leased.map((r) => r.id),
      )
      .execute();
    await during('reaper shared lapse', () => engine.reapOnce());
    expect((await during('waiting lapse', () => engine.getExecution(leased[0]!.id))).waiting?.reason).toBe('lapse_hold');
    expect(await during('claim after lapse', () => engine.claim('hist-lapse', { owner: 'w6', max: 3 }))).toHaveLength(3);

    // Circuit breaker: a failure that opens it (counted under the agent lock), the claim that
    // takes the probe once the cool-down is over, the waiting answer that seeks the probe's row.
    const cfg = { consecutive: 1, ratio: 1, window: 5, cooldown_ms: 1_000, max_cooldown_ms: 2_000, count: ['agent_error' as const] };
    await engine.agents.create({ name: 'hist-breaker', max_parallel: 3, max_backlog: 10, breaker: cfg }, 'test');
    for (let i = 0; i < 3; i++) await engine.submit('hist-breaker', { message: `breaker ${i}` }, 'test');
    const [failing] = await engine.claim('hist-breaker', { owner: 'w7' });
    const failure = { status: 'failed' as const, error: { code: 'model_error', message: 'x' } };
    await during('breaker complete', () => engine.complete(failing!.id, failing!.lease_token!, failure, 'w7'));
    await store.db.updateTable('agents').set({ breaker_until: 0 }).where('name', '=', 'hist-breaker').execute();
    expect(await during('claim breaker probe', () => engine.claim('hist-breaker', { owner: 'w7', max: 3 }))).toHaveLength(1);
    const [stillQueued] = await store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', 'hist-breaker')
      .where('status', '=', 'queued')
      .execute();
    const half = await during('waiting breaker', () => engine.getExecution(stillQueued!.id));
    expect(half.waiting?.reason).toBe('breaker_open');

    // Concurrency keys: keyed submits (the round's upsert), a debounce fold, a singleton refusal,
    // the claim that counts running tasks per key and reads the throttles, the waiting answer that
    // names the full key, the live keys read.
    await engine.agents.create(
      {
        name: 'hist-keys',
        max_parallel: 5,
        max_backlog: 20,
        key_max_parallel: 1,
        key_throttle: { limit: 100, period_seconds: 1, burst: 0 },
      },
      'test',
    );
    for (let i = 0; i < 4; i++)
      await during('keyed submit', () => engine.submit('hist-keys', { message: `k ${i}`, key: `user:${i % 2}` }, 'test'));
    await during('debounced submit', () => engine.submit('hist-keys', { message: 'd', key: 'doc', debounce_seconds: 60 }, 'test'));
    await during('debounce fold', () => engine.submit('hist-keys', { message: 'd2', key: 'doc', debounce_seconds: 60 }, 'test'));
    await during('singleton refused', () =>
      engine.submit('hist-keys', { message: 's', key: 'user:0', singleton: true }, 'test').catch(() => undefined),
    );
    expect(await during('claim keyed', () => engine.claim('hist-keys', { owner: 'wk', max: 5 }))).toHaveLength(2);
    const [keyWaits] = await store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', 'hist-keys')
      .where('status', '=', 'queued')
      .where('flow_key', '=', 'user:0')
      .execute();
    expect((await during('waiting key', () => engine.getExecution(keyWaits!.id))).waiting?.reason).toBe('key_busy');
    expect((await during('live keys', () => engine.agents.keys('hist-keys', {}))).keys).toHaveLength(3);

    // Batch submit (issue #12): the backlog count, the keys' primary-key reads and writes, the keyed rows read back.
    await engine.agents.create({ name: 'hist-batch', max_backlog: 10 }, 'test');
    const batched = await during('submit many', () =>
      engine.submitMany('hist-batch', [{ message: 'b1', idem: { key: 'plan-1', hash: 'h1' } }, { message: 'b2' }], 'test'),
    );
    expect(batched.map((o) => o.kind)).toEqual(['created', 'created']);

    // Chains (issue #14): a completion that starts a chained task (subscriptions read, link row,
    // the target's backlog count), and the source's view listing what it started.
    await engine.agents.create({ name: 'hist-chain-src', max_backlog: 10 }, 'test');
    await engine.agents.create({ name: 'hist-chain-dst', max_backlog: 10 }, 'test');
    await engine.subscriptions.create(
      { source_agent: 'hist-chain-src', target_agent: 'hist-chain-dst', on: 'any', message: '{{source.id}}' },
      'test',
    );
    await engine.submit('hist-chain-src', { message: 'chain source' }, 'test');
    const [chainSource] = await engine.claim('hist-chain-src', { owner: 'w8' });
    await during('chained complete', () => engine.complete(chainSource!.id, chainSource!.lease_token!, { status: 'succeeded' }, 'w8'));
    expect((await during('chained getExecution', () => engine.getExecution(chainSource!.id))).started).toHaveLength(1);

    // Groups (issue #14): creation (backlog counts, keys), the completion that decides a group and
    // starts its join (counter update, live members, members' outcomes), the view, a cancel.
    await engine.agents.create({ name: 'hist-group', max_parallel: 10, max_backlog: 10 }, 'test');
    const group = await during('group create', () =>
      engine.groups.create(
        {
          members: [
            { agent: 'hist-group', message: 'g0', idempotency_key: 'plan-g0' },
            { agent: 'hist-group', message: 'g1' },
          ],
          policy: 'first_succeeded',
          join: { agent: 'hist-group', message: '{{group.status}}' },
        },
        'test',
      ),
    );
    const [member] = await engine.claim('hist-group', { owner: 'w9' });
    await during('group decide', () => engine.complete(member!.id, member!.lease_token!, { status: 'succeeded', result: 1 }, 'w9'));
    expect((await during('group get', () => engine.groups.get(group.id))).join?.execution_id).not.toBeNull();
    await during('group cancel', () => engine.groups.cancel(group.id, 'test'));

    // A canary cycle over this activity: the events since its checkpoints, the executions they
    // touched, the live parts and the rechecks of open violations on old rows (planted below).
    await canaryCycle(group.id, chainSource!.id);

    // Retention: the history figures (doctor, /metrics, GET /v1/history), an export of the oldest
    // days, then one pruner batch of executions and one of audit rows (last: it removes history).
    const settings = { retentionDays: 25, auditRetentionDays: 25 };
    await during('history stats', () => readHistoryStats(engine.store, settings));
    const out = join(mkdtempSync(join(tmpdir(), 'baton-plans-')), 'export.jsonl.gz');
    const exported = await during('export', () => exportHistory({ store: engine.store, before: now - 29 * 86_400_000, out }));
    expect(exported.executions).toBeGreaterThan(0);
    rmSync(dirname(out), { recursive: true, force: true });
    const batch = await during('prune executions', () => pruneOnce({ store: engine.store, settings, now, batchSize: 300 }));
    expect(batch.executions).toBeGreaterThan(0);
    await batch.prefetched;
    // (The seed's first audit rows are young, so this reads the oldest prefix and stops there.)
    await during('prune audit', () => pruneOnce({ store: engine.store, settings, now, cursor: { phase: 'audit' } }));

    // The recording saw every path, and no plan reads history (expectPlansSeek, test/cost/plans-check.ts).
    // The agents list and one agent read agent rows and their counters (running_count, the
    // backlog counters), no history table at all, so nothing of them is recorded.
    await expectPlansSeek(
      [
        // (On PostgreSQL the plain claim is a call of baton_claim_many: its plans are read below.)
        ...(store.kind === 'sqlite' ? ['claim'] : []),
        'heartbeat',
        // (On PostgreSQL a plain completion is a call of baton_complete_many: its plans are read
        // below. A failure takes the engine's transaction on both stores.)
        ...(store.kind === 'sqlite' ? ['complete', 'complete many'] : []),
        'complete failed',
        'getExecution',
        'list status failed',
        'list deep cursor',
        'scheduler pass',
        'reaper pass',
        'dispatcher pass',
        'metrics',
        'logs read',
        'webhook overlap',
        'waiting seats',
        'waiting paused',
        'waiting push',
        'agent series',
        'agent seats',
        'agent series counts',
        'manual retry',
        'claim budget spent',
        'waiting budget',
        'budget read',
        'reaper shared lapse',
        'waiting lapse',
        // (On PostgreSQL this claim reads its candidates in its call of baton_lock_agent, whose
        // plans test/cost/flow-plans.test.ts reads.)
        ...(store.kind === 'sqlite' ? ['claim after lapse'] : []),
        'breaker complete',
        'claim breaker probe',
        'waiting breaker',
        'submit many',
        'chained complete',
        'chained getExecution',
        // ('group create' reads no history on SQLite: its backlogs come from the counters.)
        ...(store.kind === 'postgres' ? ['group create'] : []),
        'group decide',
        'group get',
        'group cancel',
        'canary cycle',
        'history stats',
        'export',
        'prune executions',
        'prune audit',
      ],
      ['listAgents', 'listAgents after a cursor', 'getAgent'],
    );

    // Calls of the SQL functions (gather.ts): each function's own statements' plans, custom and
    // generic (prepared once per connection, PostgreSQL may keep one generic plan per statement,
    // whatever the arguments), as auto_explain reports them for the first recorded call.
    if (store.kind === 'postgres') {
      const functionPlans = async (name: string, again: (parameters: unknown[]) => unknown[] = (p) => p): Promise<string[]> => {
        const call = recorded.map(compiledOf).find((c) => c.sql.includes(name));
        expect(call, `a call of ${name} was recorded`).toBeDefined();
        const plans: string[] = [];
        for (const generic of [false, true]) plans.push(await nestedPlans(call!.sql, again([...call!.parameters]), generic));
        return plans;
      };
      // Claims (baton_claim_many).
      for (const plans of await functionPlans('baton_claim_many')) {
        expect(plans, "auto_explain reported the function's statements").toMatch(/UPDATE executions x SET/);
        // Candidates by a seek into the agent's queued rows, never a walk of the live index
        // without a condition (every queued row of every agent) or of history.
        expect(plans).toMatch(/using executions_admission/);
        const lines = plans.split('\n');
        expect(lines.filter((l, k) => /using executions_admission/.test(l) && !/Index Cond: \(agent = /.test(lines[k + 1] ?? ''))).toEqual(
          [],
        );
        expect(plans).not.toMatch(/Seq Scan on executions|using executions_(status_recent|agent_status_recent|agent_recent|running)/);
        // Each taken row found again by its position.
        expect(plans).toMatch(/Tid Scan on executions/);
        // Whether a claim that took rows left its agent any (its 'empty', 0120): the agent's
        // counters, each table by its key.
        expect(plans).toMatch(/using agent_backlog_pkey/);
        expect(plans).not.toMatch(/Seq Scan on (agents|agent_backlog)\b/);
      }
      // Completions (baton_complete_many): each row by primary key, never through a
      // status or agent index (one statement over the batch was planned that way while few rows
      // were live, and then walked every live row of a 20,000-task backlog once per call).
      for (const plans of await functionPlans('baton_complete_many')) {
        expect(plans, "auto_explain reported the function's statements").toMatch(/UPDATE executions e SET/);
        expect(plans).toMatch(/using executions_pkey/);
        expect(plans).not.toMatch(
          /Seq Scan on executions|using executions_(status_recent|agent_status_recent|agent_recent|admission|running)/,
        );
        // The guards read the agent row by its name: the name is a condition of
        // the scan itself, not a join filter above a scan of every agent through the breaker's
        // filter, which parses JSON once per agent row.
        const lines = plans.split('\n');
        const agentReads = lines.flatMap((l, k) => (/ on agents a\b/.test(l) ? [lines.slice(k + 1, k + 3).join(' ')] : []));
        expect(agentReads.length).toBeGreaterThan(0);
        for (const read of agentReads) expect(read).toMatch(/\(name = /);
        expect(plans).not.toMatch(/Join Filter: .*(a\.name|s\.source_agent)/);
      }
      // Plain submits (baton_submit_many): each backlog read from the
      // agent's counters by primary key, no executions read at all. Made again (then rolled back) under
      // new ids: the first call's rows exist.
      const again = (parameters: unknown[]) => [(parameters[0] as string[]).map((id) => `${id}-again`), ...parameters.slice(1)];
      for (const plans of await functionPlans('baton_submit_many', again)) {
        expect(plans, "auto_explain reported the function's statements").toMatch(/INSERT INTO executions/);
        expect(plans).toMatch(/using agent_backlog_pkey/);
        expect(plans).not.toMatch(/Scan (using \w+ )?on executions\b/);
        // One statement writes the call's rows: each submit's agent is read by its name,
        // a lookup per submit, never a join of the submits with every agent (which a plan made while
        // the table was young chose: a scan of all agents on every call, however many there became).
        const from = plans.indexOf('INSERT INTO executions');
        const next = plans.indexOf('Query Text:', from);
        const insert = plans.slice(from, next === -1 ? undefined : next);
        const lines = insert.split('\n');
        const agentReads = lines.flatMap((l, k) => (/ on agents a(_\d+)?\b/.test(l) ? [lines.slice(k + 1, k + 3).join(' ')] : []));
        expect(agentReads.length).toBeGreaterThan(0);
        for (const read of agentReads) expect(read).toMatch(/\(name = /);
        expect(insert).not.toMatch(/Hash Cond: .*name/);
      }
    }
  });

  it("the canary's evidence reads the end of executions the pruner never deletes from", async () => {
    // PostgreSQL keeps a deleted row's index entries until vacuum, and as long as an open snapshot
    // may see the row: after a prune, a walk from the oldest end of executions_pkey passes every
    // pruned row. The same rows deleted in a transaction (rolled back) stand in for them; the
    // pages each read touches are counted, no time. SQLite removes a deleted row's entries at once.
    if (store.kind !== 'postgres') return;
    recorded.length = 0;
    await during('canary evidence', () => readEvidence(engine.store.db));
    const evidence = recorded.map(compiledOf).find((c) => /from "executions"/.test(c.sql));
    expect(evidence, 'the evidence reads executions').toBeDefined();
    const pages = (text: string) =>
      store.db.connection().execute(async (conn) => {
        await conn.executeQuery(CompiledQuery.raw('BEGIN'));
        try {
          await conn.executeQuery(CompiledQuery.raw('SET LOCAL session_replication_role = replica'));
          const cut = HISTORY / 2;
          await conn.executeQuery(CompiledQuery.raw(`DELETE FROM executions WHERE id < '${historyRow(cut).id}'`));
          const out = await conn.executeQuery<{ 'QUERY PLAN': Array<{ Plan: Record<string, number> }> }>(
            CompiledQuery.raw(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`),
          );
          const plan = out.rows[0]!['QUERY PLAN'][0]!.Plan;
          return plan['Shared Hit Blocks']! + plan['Shared Read Blocks']!;
        } finally {
          await conn.executeQuery(CompiledQuery.raw('ROLLBACK'));
        }
      });
    expect(await pages(evidence!.sql)).toBeLessThan(20);
    // The check sees a read from the oldest end.
    expect(await pages('select min("id") as "m" from "executions"')).toBeGreaterThan(20);
  });

  it('lists of schedules, webhooks and subscriptions page through indexes made for their order', async () => {
    // Configuration, not history, but a list of it must stay flat per page however much there is:
    // 3,000 of each, skewed to one agent, analysed.
    const [a, b] = AGENTS as [string, string];
    const N = 3_000;
    const at = now - 86_400_000;
    await store.transaction(async (tx) => {
      for (let i = 0; i < N; i += 500) {
        const ids = Array.from({ length: Math.min(500, N - i) }, (_, j) => i + j);
        const agentOf = (k: number) => (k % 10 === 0 ? b : a);
        await tx
          .insertInto('webhooks')
          .values(
            ids.map((k) => ({
              id: `wh_cfg_${k}`,
              agent: agentOf(k),
              schedule_id: null,
              name: `hook-${k % 700}`,
              token_hash: `cfg-${k}`,
              secret_enc: null,
              message: 'm',
              overlap_policy: 'allow' as const,
              enabled: 1,
              created_at: at,
              updated_at: at,
              last_delivery_at: null,
            })),
          )
          .execute();
        await tx
          .insertInto('schedules')
          .values(
            ids.map((k) => ({
              id: `sc_cfg_${k}`,
              agent: agentOf(k),
              name: `cfg-${String(k).padStart(5, '0')}`,
              cron: '0 0 1 1 *',
              timezone: 'UTC',
              message: 'm',
              payload: 'null',
              enabled: 0,
              overlap_policy: 'allow' as const,
              misfire_policy: 'skip' as const,
              misfire_grace_seconds: 60,
              retry_policy: null,
              priority: 0,
              next_run_at: null,
              last_run_at: null,
              created_at: at,
              updated_at: at,
            })),
          )
          .execute();
        await tx
          .insertInto('subscriptions')
          .values(
            ids.map((k) => ({
              id: `su_cfg_${String(k).padStart(5, '0')}`,
              source_agent: agentOf(k),
              target_agent: agentOf(k + 3),
              on_status: 'succeeded' as const,
              schedule_id: null,
              trigger_kind: null,
              message: 'm',
              payload: null,
              enabled: 1,
              created_at: at + k,
              created_by: 'seed',
              updated_at: at + k,
            })),
          )
          .execute();
      }
    });
    if (store.kind === 'sqlite') await sql`ANALYZE`.execute(store.db);
    else for (const table of ['webhooks', 'subscriptions', 'schedules']) await sql.raw(`VACUUM ANALYZE ${table}`).execute(store.db);
    recorded.length = 0;
    const page = { limit: 50 };
    const after = { created_at: at + 1500, id: 'su_cfg_01500' };
    await during('lists', async () => {
      for (const agent of [undefined, a, b]) {
        await engine.webhooks.list(agent, page);
        await engine.webhooks.list(agent, { ...page, after: { agent: agent ?? a, name: 'hook-5', id: 'wh_cfg_5' } });
        await engine.schedules.list(agent, page);
        await engine.schedules.list(agent, { ...page, after: { agent: agent ?? a, name: 'cfg-01500' } });
      }
      for (const q of [
        {},
        { source: b },
        { target: b },
        { source: a, target: b },
        { agent: b },
        { agent: b, source: a },
        { agent: b, target: b },
      ])
        for (const p of [page, { ...page, after }]) await engine.subscriptions.list(q, p);
    });
    const CONFIG = /"(webhooks|subscriptions|schedules)"/;
    const ORDERED = new Set([
      'webhooks_agent_name',
      'schedules_agent_name',
      'subscriptions_created',
      'subscriptions_source_created',
      'subscriptions_target_created',
      'subscriptions_pair_created',
    ]);
    const checked = new Set<string>();
    for (const r of recorded) {
      const c = compiledOf(r);
      if (!CONFIG.test(c.sql) || checked.has(c.sql)) continue;
      checked.add(c.sql);
      const cursor = /\) > \(/.test(c.sql);
      const problems: string[] = [];
      let plan: string;
      if (store.kind === 'sqlite') {
        const rows = (
          await store.db.executeQuery<{ id: number; parent: number; detail: string }>(
            CompiledQuery.raw(`EXPLAIN QUERY PLAN ${c.sql}`, [...c.parameters]),
          )
        ).rows;
        plan = rows.map((x) => x.detail).join('\n');
        const levels = new Set<number>();
        for (const { detail, parent } of rows) {
          const m = /^(SCAN|SEARCH) (webhooks|subscriptions|schedules)(?: USING (?:COVERING )?INDEX (\w+))?(.*)$/.exec(detail);
          if (!m) continue;
          levels.add(parent);
          if (!m[3] || !ORDERED.has(m[3])) problems.push(`not through an index made for the order: ${detail}`);
          if (m[1] === 'SCAN' && /\bwhere\b/i.test(c.sql)) problems.push(`scans with a filter: ${detail}`);
          if (cursor && !/\)>\(/.test(m[4]!)) problems.push(`cursor is not a range in the index: ${detail}`);
        }
        if (rows.some((x) => /TEMP B-TREE/.test(x.detail) && levels.has(x.parent))) problems.push('sorts the rows it read');
      } else {
        const out = await store.db.executeQuery<{ 'QUERY PLAN': string }>(CompiledQuery.raw(`EXPLAIN ${c.sql}`, [...c.parameters]));
        plan = out.rows.map((x) => x['QUERY PLAN']).join('\n');
        if (/(^|->\s+)(Incremental )?Sort\s|Seq Scan|Bitmap/m.test(plan)) problems.push('sorts, or scans the table');
        for (const m of plan.matchAll(/Index (?:Only )?Scan using (\w+)/g)) if (!ORDERED.has(m[1]!)) problems.push(`through ${m[1]}`);
        if (cursor && !/Index Cond: .*ROW\(/.test(plan)) problems.push('cursor is not a range in the index');
      }
      expect(problems, `${c.sql}\n${plan}`).toEqual([]);
    }
    expect(checked.size).toBeGreaterThanOrEqual(20);
  });

  it('the check itself flags the shapes that used to scan history', async () => {
    // What metrics, GET /v1/agents and the lists sent before: each must fail the check.
    const old = [
      sql`select agent, status, count(*) as n from executions group by agent, status`,
      sql`select * from executions where status in (${'failed'}, ${'cancelled'}) order by created_at desc, id desc limit ${50}`,
      sql`select * from executions where (created_at < ${now - 25 * 86_400_000} or (created_at = ${now - 25 * 86_400_000} and id < ${'ex_zzz'})) and agent = ${AGENTS[1]!} order by created_at desc, id desc limit ${50}`,
      sql`select count(*) from executions where error_code = ${'boom'}`,
      sql`select id from executions order by duration_ms desc limit ${5}`,
    ];
    for (const q of old) {
      const c = q.compile(store.db);
      const { problems, plan } = await planOf(c.sql, c.parameters);
      expect(problems, `${c.sql}\n${plan}`).not.toEqual([]);
    }
    // GET /v1/agents once counted live rows with a bound `status IN (?, ?)`, which kept SQLite off
    // the partial indexes, so it read every execution of every agent. Without those partial
    // indexes (dropped in a transaction that is rolled back) the check must catch it.
    const countsByAgent = sql`select agent, status, count(*) as n from executions where status in (${'running'}, ${'queued'}) and agent in (${AGENTS[0]!}, ${AGENTS[1]!}) group by agent, status`;
    const rollback = new Error('rollback');
    const caught = await store
      .transaction(async (tx) => {
        await sql`drop index executions_agent_status_recent`.execute(tx);
        await sql`drop index executions_status_recent`.execute(tx);
        const c = countsByAgent.compile(tx);
        const { problems, plan } = await planOf(c.sql, c.parameters, tx);
        expect(problems, `${c.sql}\n${plan}`).not.toEqual([]);
        throw rollback;
      })
      .catch((err) => err);
    expect(caught).toBe(rollback);

    // A page of one agent's queued rows read through executions_admission and sorted (what the
    // list did while the status indexes held finished rows only): a backlog may be deep.
    if (store.kind === 'sqlite') {
      const c =
        sql`select * from executions indexed by executions_admission where agent = ${AGENTS[1]!} and status = 'queued' order by created_at desc, id desc limit ${50}`.compile(
          store.db,
        );
      const { problems, plan } = await planOf(c.sql, c.parameters);
      expect(problems, `${c.sql}\n${plan}`).toContain('sorts queued rows (a backlog may hold a million)');
    }
  });
});
