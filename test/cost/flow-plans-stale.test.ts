import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { B05 } from '../../src/canary/invariants/backlog.ts';
import { F02 } from '../../src/canary/invariants/flow.ts';
import { E04 } from '../../src/canary/invariants/queue.ts';
import { AHEAD_COUNT_CAP } from '../../src/domain/admission.ts';
import { Engine } from '../../src/engine/engine.ts';
import { KeyGate, keyWaiting } from '../../src/engine/flow-keys.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import type { NewExecution } from '../../src/store/schema.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import {
  compiledOf,
  during,
  expectAgentSeek,
  expectBacklogUnread,
  nestedPlans,
  planStore,
  recorded,
  recordingStore,
  seedStaleHistory,
} from './plans-check.ts';

// The reads beside a shut key's deep backlog (test/cost/flow-plans.test.ts) with the statistics
// of before the backlog, as an old store has them: autovacuum analyses executions only after a
// tenth of it changed, so a backlog of 100,000 over 1,000,000 past executions is planned as if
// the queue were empty. PostgreSQL then estimates one queued row and, left to its costs, reads an
// agent's queued rows through executions_status_recent (led by status), every one of them, for
// the claim's prefix and key heads and for each range of the count of tasks ahead. Here the store
// is analysed with 30,000 past executions and none queued, then 3,000 tasks are queued on
// one key of fp-deep (autovacuum off for the table), and the rows each read takes are counted.

const HISTORY = 30_000;
const BACKLOG = 3_000;
const AGENTS = ['fp-deep', 'fp-a', 'fp-b', 'fp-c'];
/** Pages one statement of an agent seek may read (index descent and a few rows per agent). */
const AGENT_SEEK_PAGES = 40;
/** Queued rows a slice of canary E-04 holds here. */
const SLICE = 100;

let ts: TestStore;
let store: StoreAdapter;
let engine: Engine;
const now = Date.now();

function historyRow(i: number): NewExecution {
  const agent = AGENTS[i % AGENTS.length]!;
  const created = now - 30 * 86_400_000 + i * 60_000;
  return {
    id: `ex_stale_${String(i).padStart(7, '0')}`,
    agent,
    trigger_kind: 'api',
    origin: '{}',
    message: `history task ${i}`,
    payload: JSON.stringify({ n: i }),
    priority: 0,
    status: 'succeeded',
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
    flow_key: i % 2 === 0 ? `user:${i % 997}` : null,
    changed_at: created + 5000,
    changed_by: 'seed',
    change_reason: 'succeeded',
  } as NewExecution;
}

async function seed(): Promise<void> {
  const throttle = { limit: 1, period_seconds: 3600, burst: 0 };
  for (const name of AGENTS)
    await engine.agents.create({ name, max_parallel: 4, max_backlog: 1_000_000, key_max_parallel: 1, key_throttle: throttle }, 'seed');
  await seedStaleHistory(store, HISTORY, historyRow, ['agents', 'flow_keys']);
  for (let i = 0; i < BACKLOG; i += 1000)
    await engine.submitMany(
      'fp-deep',
      Array.from({ length: 1000 }, (_, j) => ({ message: `deep ${i + j}`, key: 'deep' })),
      'seed',
    );
}

beforeAll(async () => {
  ts = await openTestStore();
  store = ts.store;
  planStore(ts);
  engine = new Engine({ store: recordingStore(store), nodeId: 'flow-plans-stale', clock: () => now });
  await seed();
}, 120_000);
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

describe(`flow reads beside a backlog the statistics have not seen (${STORE_KIND})`, () => {
  it('the claim of a keyed agent with a shut key and the count of tasks ahead follow their indexes', async () => {
    const [held] = await engine.claim('fp-deep', { owner: 'w', max: 1 });
    expect(held!.flow_key).toBe('deep');
    const behind = await engine.submit('fp-deep', { message: 'behind', key: 'other', priority: 1 }, 'test');
    const claim = () => engine.claim('fp-deep', { owner: 'w', max: 1 });
    expect((await during('stale claim key shut', claim)).map((r) => r.id)).toEqual([behind.id]);
    expect(await during('stale claim all shut', claim)).toEqual([]);
    const queue = await store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', 'fp-deep')
      .where('status', '=', 'queued')
      .orderBy('fair_round')
      .execute();
    const waitingOf = async (what: string, i: number) => (await during(what, () => engine.getExecution(queue[i]!.id))).waiting;
    expect(await waitingOf('stale waiting head', 0)).toMatchObject({ reason: 'key_busy', ahead: 0 });
    expect(await waitingOf('stale waiting 500 deep', 500)).toMatchObject({ ahead: 500, ahead_capped: false });
    expect(await waitingOf('stale waiting 2000 deep', 2000)).toMatchObject({ ahead: AHEAD_COUNT_CAP, ahead_capped: true });
    const deep = await store.db.selectFrom('agents').selectAll().where('name', '=', 'fp-deep').executeTakeFirstOrThrow();
    await during('stale key seat holders', () => keyWaiting(engine.store.db, deep, 'deep', now));
    await during('stale key reopensAt', () =>
      engine.store.transaction(async (tx) => (await KeyGate.open(tx, 'fp-deep', deep, now))!.reopensAt(engine.store, tx, now)),
    );
    await during('stale debounce', () => engine.submit('fp-deep', { message: 'b', key: 'burst', debounce_seconds: 60 }, 'test'));
    const folded = await during('stale debounce fold', () =>
      engine.submit('fp-deep', { message: 'b2', key: 'burst', debounce_seconds: 60 }, 'test'),
    );
    expect(folded.message).toBe('b2');
    const ctx = { now, graceMs: 0, timing: {} as never, kind: store.kind, note: () => {} };
    expect(await during('stale canary F-02', () => engine.store.snapshot((tx) => F02.population(tx, ctx)))).toEqual([]);
    // Canary B-05 reads the oldest queued rows past the expiry: a range of executions_status_recent
    // from its oldest end (none here: every queued row is younger), never every queued row through
    // executions_admission, sorted by creation.
    const expiry = { ...ctx, graceMs: 60_000 };
    expect(await during('stale canary B-05', () => engine.store.snapshot((tx) => B05.population(tx, expiry)))).toEqual([]);
    // Canary E-04 reads the queue a slice a cycle: two slices, the second from where the first
    // stopped, each a range of executions_status_recent in its order, never the whole queue sorted.
    let place: unknown;
    const slices = { rows: SLICE, get: () => place, set: (p: unknown) => (place = p) };
    const sliced = { ...ctx, open: new Set<string>(), slices };
    for (const label of ['stale canary E-04', 'stale canary E-04 next'])
      expect(await during(label, () => engine.store.snapshot((tx) => E04.population(tx, sliced)))).toEqual([]);
    expect(place).toBeDefined();

    // PostgreSQL: the rows each statement takes, counted as it runs (SQLite reports none).
    await expectBacklogUnread(
      [
        'stale claim key shut',
        'stale claim all shut',
        'stale waiting head',
        'stale key seat holders',
        'stale key reopensAt',
        'stale debounce fold',
        'stale canary F-02',
        'stale canary B-05',
      ],
      BACKLOG / 10,
    );
    // Each flow read of one agent's queued keyed rows seeks its index by agent, a few pages however
    // deep the backlog: the statistics saw no queued row, and the read asks for the index's order.
    await expectAgentSeek(['stale key reopensAt'], 'executions_key_queued', AGENT_SEEK_PAGES);
    await expectAgentSeek(['stale debounce fold', 'stale canary F-02'], 'executions_debounce_open', AGENT_SEEK_PAGES);
    // PostgreSQL: a keyed claim reads its candidates inside its call of baton_lock_agent(s), planned
    // with the same stale statistics: it must walk the agent's queue in admission order, never
    // read every queued row by status and sort them, custom and generic.
    if (store.kind === 'postgres') {
      const lock = recorded
        .filter((r) => r.label === 'stale claim key shut')
        .map(compiledOf)
        .find((c) => /baton_lock_agents?\(/.test(c.sql));
      expect(lock, 'a keyed claim called baton_lock_agent(s)').toBeDefined();
      for (const generic of [false, true]) {
        const plans = (await nestedPlans(lock!.sql, lock!.parameters, generic)).split('Query Text:');
        const candidates = plans.find((p) => p.includes('jsonb_agg(to_jsonb(c)'));
        expect(candidates, "auto_explain reported the candidates' read").toBeDefined();
        expect(candidates).toMatch(/Index Scan using executions_admission on executions e\b/);
        expect(candidates).not.toMatch(/Sort Key: e\.priority/);
      }
    }
    await expectBacklogUnread(['stale canary E-04', 'stale canary E-04 next'], SLICE + 10);
    await expectBacklogUnread(['stale waiting 500 deep'], 500 + 10);
    await expectBacklogUnread(['stale waiting 2000 deep'], AHEAD_COUNT_CAP + 10);
  });
});
