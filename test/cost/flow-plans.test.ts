import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { F02 } from '../../src/canary/invariants/flow.ts';
import { runCanaryOnce } from '../../src/canary/run.ts';
import { Engine } from '../../src/engine/engine.ts';
import { KeyGate, keyWaiting } from '../../src/engine/flow-keys.ts';
import { liveKeyCounts } from '../../src/engine/flow-keys-read.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import type { ExecutionRow, NewExecution } from '../../src/store/schema.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { AHEAD_COUNT_CAP } from '../../src/domain/admission.ts';
import {
  checkRecorded,
  compiledOf,
  during,
  expectAgentSeek,
  expectBacklogUnread,
  expectPlansSeek,
  HISTORY_TABLES,
  nestedPlans,
  planStore,
  recorded,
  recordingStore,
} from './plans-check.ts';

// Flow control over history (the check of test/cost/plans.test.ts): every read and write behind
// concurrency keys, pools, throttles and pool budgets, run by the real functions against a store
// seeded with 30,000 terminal executions of the same agents (their admission and completion
// events, keyed ones among them) and a year of a pool budget's ledger windows, analysed. Each
// statement that touches a history table must seek: admission of a pooled agent (seats summed
// over its members, the turns, the throttles, the budget's windows), the completion that spends
// a pool's budget, every `waiting` answer a flow limit gives, the pool and live keys reads of the
// API, CLI and dashboard, the metrics' gauges, a debounce fold and a singleton check, and a
// canary cycle whose flow invariants replay the new events over the seeded log. Beside the
// history, one keyed agent has a deep backlog on one key (in the statistics): the reads of its
// key's seats, its closed throttle and its debounced tasks, and canary invariant F-02, must not
// read that backlog (PostgreSQL: counted as they run).

const HISTORY = 30_000;
/** The busy member of the pool (most of history), its quiet peer, and the rest. */
const POOLED = ['fp-a', 'fp-b'];
const OTHERS = ['fp-thr', 'fp-bud', 'fp-own', 'fp-keys'];
const AGENTS = [...POOLED, ...OTHERS];
const HOUR = 3_600_000;
/** Queued tasks of one key of fp-deep. */
const BACKLOG = 3_000;

let ts: TestStore;
let store: StoreAdapter;
let engine: Engine;
const now = Date.now();

function historyRow(i: number): NewExecution {
  const k = i % 25;
  const agent = k < 20 ? AGENTS[0]! : AGENTS[k - 19]!;
  const created = now - 30 * 86_400_000 + i * 60_000;
  const status = i % 50 === 0 ? 'failed' : 'succeeded';
  return {
    id: `ex_flow_${String(i).padStart(7, '0')}`,
    agent,
    trigger_kind: 'api',
    origin: '{}',
    message: `history task ${i}`,
    payload: JSON.stringify({ n: i }),
    priority: 0,
    status,
    attempt: 1,
    max_redeliveries: 3,
    timeout_seconds: 600,
    lease_ttl_seconds: 30,
    lease_owner: 'w',
    lease_token: `tok_${i}`,
    heartbeat_at: created + 1000,
    created_at: created,
    queued_at: created,
    started_at: created + 1000,
    completed_at: created + 5000,
    duration_ms: 4000,
    // Keyed history: many keys, each rare.
    flow_key: agent === 'fp-keys' || agent === 'fp-a' ? `user:${i % 997}` : null,
    changed_at: created + 5000,
    changed_by: 'seed',
    change_reason: status,
  } as NewExecution;
}

async function seed(): Promise<void> {
  const budget = (limit: number) => ({
    limits: [
      { metric: 'total_tokens' as const, window: 'minute' as const, limit },
      { metric: 'total_tokens' as const, window: 'hour' as const, limit: limit * 100 },
      { metric: 'total_tokens' as const, window: 'day' as const, limit: limit * 1000 },
    ],
  });
  const throttle = { limit: 1, period_seconds: 3600, burst: 0 };
  await engine.pools.create({ name: 'fp-seats', max_parallel: 1, budget: budget(1_000_000) }, 'seed');
  await engine.pools.create({ name: 'fp-slow', throttle }, 'seed');
  await engine.pools.create({ name: 'fp-spend', budget: budget(10) }, 'seed');
  for (const a of POOLED) await engine.agents.create({ name: a, max_parallel: 4, max_backlog: 100, pools: ['fp-seats'] }, 'seed');
  await engine.agents.create({ name: 'fp-thr', max_parallel: 4, pools: ['fp-slow'] }, 'seed');
  await engine.agents.create({ name: 'fp-bud', max_parallel: 4, pools: ['fp-spend'] }, 'seed');
  await engine.agents.create({ name: 'fp-own', max_parallel: 4, throttle }, 'seed');
  await engine.agents.create({ name: 'fp-keys', max_parallel: 5, max_backlog: 20, key_max_parallel: 1, key_throttle: throttle }, 'seed');
  await engine.agents.create(
    { name: 'fp-deep', max_parallel: 4, max_backlog: 1_000_000, key_max_parallel: 1, key_throttle: throttle },
    'seed',
  );
  for (let i = 0; i < BACKLOG; i += 1000)
    await engine.submitMany(
      'fp-deep',
      Array.from({ length: 1000 }, (_, j) => ({ message: `deep ${i + j}`, key: 'deep' })),
      'seed',
    );
  const chunk = 1000;
  for (let i = 0; i < HISTORY; i += chunk) {
    const rows = Array.from({ length: Math.min(chunk, HISTORY - i) }, (_, j) => historyRow(i + j));
    await store.transaction(async (tx) => {
      await store.insertMany(tx, 'executions', rows);
      const event = (r: NewExecution, from: 'queued' | 'running', to: 'running' | 'succeeded' | 'failed', at: number) => ({
        execution_id: r.id!,
        agent: r.agent!,
        from_status: from,
        to_status: to,
        at,
        actor: 'seed',
        reason: null,
        attempt: 1,
        seats_in_use: null,
        seat_cap: null,
        flow_key: r.flow_key ?? null,
      });
      await tx
        .insertInto('execution_events')
        .values(
          rows.flatMap((r) => [
            event(r, 'queued', 'running', r.started_at!),
            event(r, 'running', r.status as 'succeeded', r.completed_at!),
          ]),
        )
        .execute();
    });
  }
  // Logs of the last 500 executions (the canary's scans of new executions read them): 20 lines each.
  for (let i = 0; i < 500; i += 100)
    await store.transaction(async (tx) => {
      for (let j = i; j < i + 100; j++) {
        const id = historyRow(HISTORY - 1 - j).id!;
        const lines = Array.from({ length: 20 }, (_, s) => ({
          execution_id: id,
          seq: s + 1,
          at: now,
          stream: 'stdout' as const,
          line: `line ${s}`,
        }));
        await tx.insertInto('execution_logs').values(lines).execute();
        await tx.insertInto('execution_log_heads').values({ execution_id: id, lines: 20, bytes: 200, truncated: 0 }).execute();
      }
    });
  // A pool's budget ledger grows a row per window with spending: a year of hours, days and months
  // (minutes are forgotten as they pass), for the pools with budgets.
  for (const pool of ['fp-seats', 'fp-spend']) {
    const rows = [];
    for (let h = 1; h <= 365 * 24; h++) {
      const start = Math.floor((now - h * HOUR) / HOUR) * HOUR;
      rows.push({ pool, window_kind: 'hour' as const, window_start: start, cost_usd: 0, total_tokens: 5, run_ms: 0, updated_at: start });
      if (h % 24 === 0)
        rows.push({ pool, window_kind: 'day' as const, window_start: start, cost_usd: 0, total_tokens: 5, run_ms: 0, updated_at: start });
    }
    for (let i = 0; i < rows.length; i += 2000)
      await store.db
        .insertInto('pool_budget_ledger')
        .values(rows.slice(i, i + 2000))
        .execute();
  }
  if (store.kind === 'sqlite') await sql`ANALYZE`.execute(store.db);
  else
    for (const table of [...HISTORY_TABLES, 'agents', 'pools', 'agent_pools', 'flow_keys'])
      await sql.raw(`VACUUM ANALYZE ${table}`).execute(store.db);
}

beforeAll(async () => {
  ts = await openTestStore();
  store = ts.store;
  planStore(ts);
  engine = new Engine({ store: recordingStore(store), nodeId: 'flow-plans', clock: () => now });
  await seed();
}, 120_000);
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

/**
 * SQLite reports no rows read: the backlog's claim and counts are judged by the indexes they use.
 * The claim seeks the other key's head (executions_key_admission) rather than filter the shut
 * key's rows out of a walk; each range of the count of tasks ahead is bounded past the agent.
 */
async function expectSqliteBacklogPlans(): Promise<void> {
  const checked = await checkRecorded();
  const lines = (label: string) => checked.filter((c) => c.label === label).flatMap((c) => c.plan.split('\n'));
  expect(lines('backlog claim key shut').some((l) => /executions_key_admission \(agent=\? AND flow_key=\?\)/.test(l))).toBe(true);
  for (const label of ['backlog waiting head', 'backlog waiting 500 deep', 'backlog waiting 2000 deep']) {
    const admission = lines(label).filter((l) => /executions_admission/.test(l));
    expect(admission.length, label).toBeGreaterThan(0);
    for (const l of admission) expect(l, label).toMatch(/executions_admission \(agent=\? AND priority[=<]\?/);
  }
}

const submit = (agent: string, message: string, extra: Record<string, unknown> = {}) => engine.submit(agent, { message, ...extra }, 'test');
const claim = (agent: string, max = 1) => engine.claim(agent, { owner: 'wf', max });
const complete = (r: ExecutionRow, tokens = 1) =>
  engine.complete(r.id, r.lease_token!, { status: 'succeeded', usage: { total_tokens: tokens } }, 'wf');
const reason = async (what: string, id: string) => (await during(what, () => engine.getExecution(id))).waiting?.reason;

/** The per-key read of running rows, by either index that seeks them (see its use below). */
const RUNNING_KEYS_SEEK =
  /executions_key_running|Index Scan using executions_status_recent on executions e\b[^\n]*\n\s*Index Cond: \(\(status\)::text = 'running'::text\)\n/;

describe(`flow control's plans over ${HISTORY.toLocaleString('en')} executions of history (${STORE_KIND})`, () => {
  it('every read of keys, pools, throttles and pool budgets seeks instead of scanning history', async () => {
    // The canary caught up with the seeded log first (unrecorded, as a running canary would be).
    for (let i = 0; i < 200; i++) if ((await runCanaryOnce({ store, clock: () => now })).events?.caught_up) break;

    // A pool's seats: the busy member holds the one seat; its peer is refused (pool_full) and
    // waits for a turn; the seat freed goes to the peer (pool_turn for the busy one).
    for (let i = 0; i < 3; i++) await during('pooled submit', () => submit('fp-a', `a ${i}`));
    const [heldA] = await during('claim pooled', () => claim('fp-a'));
    const [taskB] = [await submit('fp-b', 'b 0')];
    expect(await during('claim pool full', () => claim('fp-b'))).toEqual([]);
    expect(await reason('waiting pool full', taskB!.id)).toBe('pool_full');
    await during('complete pooled', () => complete(heldA!));
    expect(await during('claim pool turn', () => claim('fp-a'))).toEqual([]);
    const [queuedA] = await store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', 'fp-a')
      .where('status', '=', 'queued')
      .execute();
    expect(await reason('waiting pool turn', queuedA!.id)).toBe('pool_turn');
    const [heldB] = await during('claim turn taken', () => claim('fp-b'));
    expect(heldB!.id).toBe(taskB!.id);

    // A pool's throttle, an agent's own throttle.
    for (const agent of ['fp-thr', 'fp-own']) for (let i = 0; i < 2; i++) await submit(agent, `t ${i}`);
    expect(await during('claim pool throttle', () => claim('fp-thr', 2))).toHaveLength(1);
    expect(await during('claim own throttle', () => claim('fp-own', 2))).toHaveLength(1);
    const queuedOf = async (agent: string) =>
      (
        await store.db
          .selectFrom('executions')
          .select('id')
          .where('agent', '=', agent)
          .where('status', '=', 'queued')
          .executeTakeFirstOrThrow()
      ).id;
    expect(await reason('waiting pool throttled', await queuedOf('fp-thr'))).toBe('pool_throttled');
    expect(await reason('waiting throttled', await queuedOf('fp-own'))).toBe('throttled');

    // A pool's budget spent by a completion (its windows upserted, old minutes forgotten).
    for (let i = 0; i < 2; i++) await submit('fp-bud', `m ${i}`);
    const [spender] = await claim('fp-bud');
    await during('complete pool budget', () => complete(spender!, 100));
    expect(await during('claim pool budget spent', () => claim('fp-bud'))).toEqual([]);
    expect(await reason('waiting pool budget', await queuedOf('fp-bud'))).toBe('pool_budget_spent');

    // Keys: one busy (its cap held), one throttled (it started this period), a debounce fold, a singleton refusal.
    for (const key of ['user:0', 'user:0', 'user:1']) await during('keyed submit', () => submit('fp-keys', key, { key }));
    const keyed = await during('claim keyed', () => claim('fp-keys', 5));
    expect(keyed).toHaveLength(2);
    await complete(keyed.find((r) => r.flow_key === 'user:1')!);
    const again = await submit('fp-keys', 'user:1 again', { key: 'user:1' });
    expect(await during('claim keyed refused', () => claim('fp-keys', 5))).toEqual([]);
    const busy = await store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', 'fp-keys')
      .where('status', '=', 'queued')
      .where('flow_key', '=', 'user:0')
      .executeTakeFirstOrThrow();
    expect(await reason('waiting key busy', busy.id)).toBe('key_busy');
    expect(await reason('waiting key throttled', again.id)).toBe('key_throttled');
    await during('debounced submit', () => submit('fp-keys', 'd', { key: 'doc', debounce_seconds: 60 }));
    await during('debounce fold', () => submit('fp-keys', 'd2', { key: 'doc', debounce_seconds: 60 }));
    await during('singleton refused', () => submit('fp-keys', 's', { key: 'user:0', singleton: true }).catch(() => undefined));
    const keys = (await during('live keys', () => engine.agents.keys('fp-keys', {}))).keys;
    expect(keys.map((k) => k.key)).toEqual(['doc', 'user:0', 'user:1']);
    expect(keys.find((k) => k.key === 'user:0')).toMatchObject({ running: 1, queued: 1, max_parallel: 1 });
    await during('live keys after a cursor', () => engine.agents.keys('fp-keys', { after: 'doc', limit: 1 }));

    // The pool reads of the API, the CLI and the dashboard; the metrics' gauges.
    expect((await during('pool list', () => engine.pools.list())).map((p) => p.name)).toEqual(['fp-seats', 'fp-slow', 'fp-spend']);
    const usage = await during('pool get', () => engine.pools.get('fp-seats'));
    expect(usage).toMatchObject({ agents: POOLED, in_use: 1 });
    await during('pool get budget', () => engine.pools.get('fp-spend'));
    await during('pool gauges', () => engine.pools.gauges());
    await during('live key counts', () => liveKeyCounts(engine.store.db));
    await during('pool delete refused', () => engine.pools.delete('fp-seats', 'test').catch(() => undefined));
    await during('pool update', () =>
      engine.pools.update('fp-spend', { budget: { limits: [{ metric: 'total_tokens', window: 'hour', limit: 5000 }] } }, 'test'),
    );

    // The deep backlog: one of its key's tasks running, the key's throttle closed; the seats of
    // that key, when the throttle reopens, a debounced burst on another key, F-02.
    const [deepHeld] = await claim('fp-deep');
    expect(deepHeld!.flow_key).toBe('deep');
    // A task of another key behind the shut key's whole backlog (a lower priority): the claim finds
    // it by that key's head; the next claim finds every queued key shut.
    const behind = await submit('fp-deep', 'behind', { key: 'other', priority: 1 });
    expect((await during('backlog claim key shut', () => claim('fp-deep'))).map((r) => r.id)).toEqual([behind.id]);
    expect(await during('backlog claim all shut', () => claim('fp-deep'))).toEqual([]);
    // The tasks ahead of the shut key's head, of a task 500 deep (exact) and of one 2,000 deep (past the count's cap).
    const deepQueue = await store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', 'fp-deep')
      .where('status', '=', 'queued')
      .orderBy('fair_round')
      .execute();
    const waitingOf = async (what: string, i: number) => (await during(what, () => engine.getExecution(deepQueue[i]!.id))).waiting;
    expect(await waitingOf('backlog waiting head', 0)).toMatchObject({ reason: 'key_busy', ahead: 0, ahead_capped: false });
    expect(await waitingOf('backlog waiting 500 deep', 500)).toMatchObject({ ahead: 500, ahead_capped: false });
    expect(await waitingOf('backlog waiting 2000 deep', 2000)).toMatchObject({ ahead: AHEAD_COUNT_CAP, ahead_capped: true });
    const deep = await store.db.selectFrom('agents').selectAll().where('name', '=', 'fp-deep').executeTakeFirstOrThrow();
    const held = await during('backlog key seat holders', () => keyWaiting(engine.store.db, deep, 'deep', now));
    expect(held).toMatchObject({ reason: 'key_busy', key: { running: 1 } });
    const reopens = await during('backlog key reopensAt', () =>
      engine.store.transaction(async (tx) => (await KeyGate.open(tx, 'fp-deep', deep, now))!.reopensAt(engine.store, tx, now)),
    );
    expect(reopens).toBeGreaterThan(now);
    await during('backlog debounce', () => submit('fp-deep', 'b', { key: 'burst', debounce_seconds: 60 }));
    const folded = await during('backlog debounce fold', () => submit('fp-deep', 'b2', { key: 'burst', debounce_seconds: 60 }));
    expect(folded.message).toBe('b2');
    const ctx = { now, graceMs: 0, timing: {} as never, kind: store.kind, note: () => {} };
    expect(await during('backlog canary F-02', () => engine.store.snapshot((tx) => F02.population(tx, ctx)))).toEqual([]);

    // The canary's flow invariants over the new events (seats per key and per pool, throttle
    // starts per window, debounced bursts), after the seeded log.
    await during('canary cycle', () => runCanaryOnce({ store: engine.store, clock: () => now + 1 }));

    // The recording saw every path, and no plan reads history (expectPlansSeek, test/cost/plans-check.ts).
    if (store.kind === 'sqlite') await expectSqliteBacklogPlans();
    await expectPlansSeek([
      'claim pooled',
      'claim pool full',
      'waiting pool full',
      'complete pooled',
      'claim pool turn',
      'waiting pool turn',
      'claim turn taken',
      // (On PostgreSQL this claim is a gathered admission of one: its reads are its call of
      // baton_lock_agents, whose plans are read below, and its row is taken by primary key in
      // baton_take_rows.)
      ...(store.kind === 'sqlite' ? ['claim pool throttle'] : []),
      'waiting pool throttled',
      'waiting throttled',
      'complete pool budget',
      'claim pool budget spent',
      'waiting pool budget',
      // (On PostgreSQL a keyed submit is a call of baton_submit, and a keyed claim with no key
      // shut reads in its call of baton_lock_agents: their plans are read below.)
      ...(store.kind === 'sqlite' ? ['keyed submit', 'claim keyed'] : []),
      'waiting key busy',
      'waiting key throttled',
      'debounce fold',
      'singleton refused',
      'live keys',
      'live keys after a cursor',
      'pool get budget',
      'live key counts',
      'canary cycle',
      'backlog claim key shut',
      'backlog claim all shut',
      'backlog waiting head',
      'backlog waiting 500 deep',
      'backlog waiting 2000 deep',
      'backlog key seat holders',
      'backlog key reopensAt',
      'backlog debounce fold',
      'backlog canary F-02',
    ]);
    await expectBacklogUnread(
      [
        'backlog claim key shut',
        'backlog claim all shut',
        'backlog waiting head',
        'backlog key seat holders',
        'backlog key reopensAt',
        'backlog debounce fold',
        'backlog canary F-02',
      ],
      BACKLOG / 10,
    );
    // Counting the tasks ahead reads no more rows than it counts (up to the cap), and a few more.
    // Each flow read of one agent's queued keyed rows seeks its index by agent (analysed statistics).
    await expectAgentSeek(['backlog key reopensAt'], 'executions_key_queued', 40);
    await expectAgentSeek(['backlog debounce fold', 'backlog canary F-02'], 'executions_debounce_open', 40);
    await expectBacklogUnread(['backlog waiting 500 deep'], 500 + 10);
    await expectBacklogUnread(['backlog waiting 2000 deep'], AHEAD_COUNT_CAP + 10);

    // A keyed submit on PostgreSQL, a call of baton_submit (its round taken inside): its own
    // statements' plans (made again under a new id, rolled back), custom and generic: rounds and
    // backlogs by primary key, no executions read.
    if (store.kind === 'postgres') {
      const call = recorded
        .filter((r) => r.label === 'keyed submit')
        .map(compiledOf)
        .find((c) => c.sql.includes('baton_submit('));
      expect(call, 'a keyed submit called baton_submit').toBeDefined();
      const again = [`${call!.parameters[0] as string}-again`, ...call!.parameters.slice(1)];
      for (const generic of [false, true]) {
        const plans = await nestedPlans(call!.sql, again, generic);
        expect(plans, "auto_explain reported the function's statements").toMatch(/INSERT INTO executions/);
        expect(plans).not.toMatch(/Scan (using \w+ )?on executions\b/);
      }
      // A keyed agent's admission on PostgreSQL locks its row and reads its running tasks per key
      // and its candidates in one call of baton_lock_agent(s) (its tasks running then: the per-key
      // read is made): the per-key read seeks the agent's running keyed rows and the candidates
      // walk the agent's queue in admission order, custom and generic.
      const lock = recorded
        .filter((r) => r.label === 'claim keyed refused')
        .map(compiledOf)
        .find((c) => /baton_lock_agents?\(/.test(c.sql));
      expect(lock, 'a keyed claim called baton_lock_agent(s)').toBeDefined();
      for (const generic of [false, true]) {
        const plans = await nestedPlans(lock!.sql, lock!.parameters, generic);
        // The per-key read is planned either through executions_key_running or through
        // executions_status_recent with status = 'running' as its index condition, depending on
        // the sample ANALYZE took (both estimate one row; CI saw the second once in three runs):
        // either reads the running rows only, never history.
        expect(plans, "auto_explain reported the function's statements").toMatch(RUNNING_KEYS_SEEK);
        expect(plans).toMatch(/Index Scan using executions_admission on executions/);
        expect(plans).not.toMatch(/Seq Scan on executions\b/);
      }
    }
  });
});
