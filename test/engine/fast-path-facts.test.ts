/**
 * The fast paths' facts (src/domain/fast-paths.ts): every hold and every completion side effect
 * flips them where it is configured or changes; a hold written only in TypeScript holds alike on
 * PostgreSQL with its fast paths, PostgreSQL with them forced off, and SQLite; and where the facts
 * allow, the store's fast path is what decides.
 */
import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addHoldRule, ADMISSION_HOLDS, holdRules } from '../../src/domain/admission.ts';
import { Engine } from '../../src/engine/engine.ts';
import { clearLapseHold, setLapseHold } from '../../src/engine/transitions/lapse.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import type { FastPaths } from '../../src/store/fast-paths.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, PG_URL, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
/** PostgreSQL only: the same schema opened with its fast paths forced off. */
let slowStore: StoreAdapter | undefined;
const clock = manualClock();
let n = 0;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'facts' });
  if (STORE_KIND === 'postgres') slowStore = openPostgres({ url: PG_URL, schema: ts.location.schema, poolMax: 2, fastPaths: false });
});
afterAll(async () => {
  engine.close();
  await slowStore?.close();
  await ts.cleanup();
});

const newAgent = async (extra: Record<string, unknown> = {}, prefix = 'facts') => {
  const name = `${prefix}-${++n}`;
  await engine.agents.create({ name, max_parallel: 5, max_backlog: 100, breaker: null, ...extra }, 'test');
  return name;
};

const facts = async (agent: string) => {
  const row = await ts.store.db
    .selectFrom('agents')
    .select(['fast_claim', 'fast_complete'])
    .where('name', '=', agent)
    .executeTakeFirstOrThrow();
  return { claim: Number(row.fast_claim), complete: Number(row.fast_complete) };
};

describe(`fast-path facts (${STORE_KIND})`, () => {
  it('the holds decided are the holds listed, in order', () => {
    expect(holdRules().map((h) => h.reason)).toEqual([...ADMISSION_HOLDS]);
  });

  it('an agent with no hold and no side effect may take both fast paths; so may a new one with the default breaker (its window full of successes)', async () => {
    expect(await facts(await newAgent())).toEqual({ claim: 1, complete: 1 });
    const withBreaker = await newAgent({ breaker: undefined });
    expect(await facts(withBreaker)).toEqual({ claim: 1, complete: 1 });
  });

  it('pause and resume flip the claim fact', async () => {
    const agent = await newAgent();
    const paused = await engine.agents.pause(agent, 'why', 'test');
    expect(paused.agent).toMatchObject({ fast_claim: 0, fast_complete: 1 });
    expect(await facts(agent)).toEqual({ claim: 0, complete: 1 });
    await engine.agents.resume(agent, 'test');
    expect(await facts(agent)).toEqual({ claim: 1, complete: 1 });
  });

  it('a budget flips both; removing it flips them back', async () => {
    const agent = await newAgent({ budget: { limits: [{ metric: 'total_tokens', window: 'hour', limit: 150 }] } });
    expect(await facts(agent)).toEqual({ claim: 0, complete: 0 });
    await engine.agents.update(agent, { budget: null }, 'test');
    expect(await facts(agent)).toEqual({ claim: 1, complete: 1 });
    await engine.agents.update(agent, { budget: { limits: [{ metric: 'total_tokens', window: 'hour', limit: 150 }] } }, 'test');
    expect(await facts(agent)).toEqual({ claim: 0, complete: 0 });
  });

  it('a lapse hold set and cleared flips the claim fact', async () => {
    const agent = await newAgent();
    await ts.store.transaction((tx) => setLapseHold(tx, agent, ['x1', 'x2'], clock(), 'reaper'));
    expect(await facts(agent)).toEqual({ claim: 0, complete: 1 });
    await ts.store.transaction((tx) => clearLapseHold(tx, agent, clock(), 'w', 'claim'));
    expect(await facts(agent)).toEqual({ claim: 1, complete: 1 });
  });

  it('subscriptions as source flip the completion fact: created, disabled, enabled, deleted, and with the target agent', async () => {
    const source = await newAgent();
    const target = await newAgent();
    const sub = await engine.subscriptions.create({ source_agent: source, target_agent: target, on: 'succeeded', message: 'next' }, 'test');
    expect(await facts(source)).toEqual({ claim: 1, complete: 0 });
    expect(await facts(target)).toEqual({ claim: 1, complete: 1 });
    await engine.subscriptions.update(sub.id, { enabled: false }, 'test');
    expect(await facts(source)).toEqual({ claim: 1, complete: 1 });
    await engine.subscriptions.update(sub.id, { enabled: true }, 'test');
    expect(await facts(source)).toEqual({ claim: 1, complete: 0 });
    await engine.subscriptions.delete(sub.id, 'test');
    expect(await facts(source)).toEqual({ claim: 1, complete: 1 });
    await engine.subscriptions.create({ source_agent: source, target_agent: target, on: 'succeeded', message: 'next' }, 'test');
    expect(await facts(source)).toEqual({ claim: 1, complete: 0 });
    await engine.agents.delete(target, 'test');
    expect(await facts(source)).toEqual({ claim: 1, complete: 1 });
  });

  it("a pool's budget flips its members' completion fact: set, removed, and for an agent that joins or leaves", async () => {
    const pool = `facts-pool-${++n}`;
    await engine.pools.create({ name: pool, max_parallel: 10 }, 'test');
    const member = await newAgent({ pools: [pool] });
    // A seat cap keeps claims in the engine's transaction; without a budget a completion spends nothing.
    expect(await facts(member)).toEqual({ claim: 0, complete: 1 });
    const budget = { limits: [{ metric: 'total_tokens' as const, window: 'hour' as const, limit: 150 }] };
    await engine.pools.update(pool, { budget }, 'test');
    expect(await facts(member)).toEqual({ claim: 0, complete: 0 });
    const joiner = await newAgent({ pools: [pool] });
    expect(await facts(joiner)).toEqual({ claim: 0, complete: 0 });
    await engine.agents.update(joiner, { pools: [] }, 'test');
    expect(await facts(joiner)).toEqual({ claim: 1, complete: 1 });
    await engine.pools.update(pool, { budget: null }, 'test');
    expect(await facts(member)).toEqual({ claim: 0, complete: 1 });
  });

  it('the breaker: a failure dirties the window, a trip holds claims, closing frees them', async () => {
    const agent = await newAgent({
      breaker: { consecutive: 2, ratio: 1, window: 3, cooldown_ms: 60_000, max_cooldown_ms: 60_000, count: ['agent_error'] },
    });
    const run = async (status: 'succeeded' | 'failed') => {
      await engine.submit(agent, { message: status }, 'test');
      const [row] = await engine.claim(agent, { owner: 'w' });
      clock.advance(1);
      await engine.complete(
        row!.id,
        row!.lease_token!,
        status === 'failed' ? { status, error: { code: 'boom', message: 'x' } } : { status },
        'w',
      );
    };
    for (let i = 0; i < 3; i++) await run('succeeded');
    expect(await facts(agent)).toEqual({ claim: 1, complete: 1 });
    await run('failed');
    expect(await facts(agent)).toEqual({ claim: 1, complete: 0 });
    await run('failed');
    const row = await ts.store.db.selectFrom('agents').select('breaker_state').where('name', '=', agent).executeTakeFirstOrThrow();
    expect(row.breaker_state).toBe('open');
    expect(await facts(agent)).toEqual({ claim: 0, complete: 0 });
    await engine.agents.closeBreaker(agent, 'test');
    expect(await facts(agent)).toEqual({ claim: 1, complete: 0 }); // a fresh window is not yet written
    await run('succeeded'); // writes it: the outcomes it has not seen count as successes
    expect(await facts(agent)).toEqual({ claim: 1, complete: 1 });
  });

  it("a group's members and join carry the execution's completion fact; plain work does not", async () => {
    const agent = await newAgent();
    const join = await newAgent();
    const g = await engine.groups.create({ members: [{ agent, message: 'm' }], join: { agent: join, message: 'j' } }, 'test');
    const plain = await engine.submit(agent, { message: 'plain' }, 'test');
    const rows = await ts.store.db
      .selectFrom('executions')
      .select(['id', 'group_id', 'fast_complete'])
      .where('agent', '=', agent)
      .execute();
    expect(rows.find((r) => r.group_id === g.id)?.fast_complete).toBe(0);
    expect(rows.find((r) => r.id === plain.id)?.fast_complete).toBe(1);
  });
});

/** Engines over this store, and on PostgreSQL over the same schema with its fast paths forced off. */
function variants(): Array<{ label: string; engine: Engine }> {
  const out = [{ label: STORE_KIND === 'postgres' ? 'pg-fast' : 'sqlite', engine }];
  if (slowStore) out.push({ label: 'pg-slow', engine: new Engine({ store: slowStore, clock, nodeId: 'facts-slow' }) });
  return out;
}

describe(`a hold written only in TypeScript (${STORE_KIND})`, () => {
  it('holds on every store and path, and lets other agents through', async () => {
    const heldAgents: Array<{ v: { label: string; engine: Engine }; held: string }> = [];
    const remove = addHoldRule({
      reason: 'test_hold',
      decide: (a) => (a.name?.startsWith('held-') ? { reason: 'agent_paused', by: 'test-hold', why: 'a test hold', since: 0 } : null),
      mayApply: (a) => a.name.startsWith('held-'),
    });
    try {
      for (const v of variants()) {
        const held = await newAgent({}, `held-${v.label}`);
        heldAgents.push({ v, held });
        const free = await newAgent({}, `free-${v.label}`);
        expect(await facts(held)).toEqual({ claim: 0, complete: 1 });
        await v.engine.submit(held, { message: 'h' }, 'test');
        await v.engine.submit(free, { message: 'f' }, 'test');
        expect(await v.engine.claim(held, { owner: 'w' }), v.label).toEqual([]);
        expect(await v.engine.claim(free, { owner: 'w' }), v.label).toHaveLength(1);
      }
    } finally {
      remove();
    }
    // Once removed, the held agents' facts follow the next change: they admit again.
    for (const { v, held } of heldAgents) {
      await engine.agents.update(held, { description: 'released' }, 'test');
      expect(await v.engine.claim(held, { owner: 'w' }), v.label).toHaveLength(1);
    }
  });

  it.skipIf(STORE_KIND !== 'postgres')(
    'is bypassed by the fast path only where its `mayApply` is wrong: the facts are what protect it',
    async () => {
      // A planted divergence: the hold decides, but says it can never apply.
      const remove = addHoldRule({
        reason: 'test_hold',
        decide: (a) => (a.name?.startsWith('wrong-') ? { reason: 'agent_paused', by: 'test-hold', why: 'a test hold', since: 0 } : null),
        mayApply: () => false,
      });
      try {
        const answers: Record<string, number> = {};
        for (const v of variants()) {
          const agent = await newAgent({}, `wrong-${v.label}`);
          await v.engine.submit(agent, { message: 'w' }, 'test');
          answers[v.label] = (await v.engine.claim(agent, { owner: 'w' })).length;
        }
        expect(answers).toEqual({ 'pg-fast': 1, 'pg-slow': 0 });
      } finally {
        remove();
      }
    },
  );
});

describe.skipIf(STORE_KIND !== 'postgres')('the fast path is taken where the facts allow', () => {
  it('claims and completions go through store.fastPaths and are decided there, or left to the transaction', async () => {
    const calls: Array<{ op: string; decided: string[] }> = [];
    const inner = ts.store.fastPaths!;
    const spy: FastPaths = {
      alone: (s) => inner.alone(s),
      submitOne: (s) => inner.submitOne(s),
      submitGathered: (s) => inner.submitGathered(s),
      submitClaim: (s, c) => inner.submitClaim(s, c),
      claimMany: async (c) => {
        const out = await inner.claimMany(c);
        calls.push({ op: 'claim', decided: [...out.keys()] });
        return out;
      },
      completeMany: async (c) => {
        const out = await inner.completeMany(c);
        calls.push({ op: 'complete', decided: [...out.keys()] });
        return out;
      },
      takeRows: (tx, t) => inner.takeRows(tx, t),
      lockPools: (tx, n) => inner.lockPools(tx, n),
      lockAgent: (tx, a, r) => inner.lockAgent(tx, a, r),
      lockAdmissions: (tx, i) => inner.lockAdmissions(tx, i),
      admitWrites: (tx, w) => inner.admitWrites(tx, w),
    };
    const store = Object.create(ts.store) as StoreAdapter;
    Object.defineProperty(store, 'fastPaths', { value: spy });
    const spied = new Engine({ store, clock, nodeId: 'facts-spy' });
    try {
      const plain = await newAgent();
      const paused = await newAgent();
      await spied.agents.pause(paused, 'why', 'test');
      const row = await spied.submit(plain, { message: 'p' }, 'test');
      await spied.submit(paused, { message: 'p' }, 'test');
      const [claimed] = await spied.claim(plain, { owner: 'w' });
      expect(claimed?.id).toBe(row.id);
      expect(await spied.claim(paused, { owner: 'w' })).toEqual([]);
      await spied.complete(claimed!.id, claimed!.lease_token!, { status: 'succeeded' }, 'w');
      expect(calls).toEqual([
        { op: 'claim', decided: [plain] },
        { op: 'claim', decided: [] }, // a hold may apply: the transaction decided
        { op: 'complete', decided: [row.id] },
      ]);
    } finally {
      spied.close();
    }
  });
});

describe(`the migration's backfill (${STORE_KIND})`, () => {
  it('computes the facts the engine keeps, for agents in every state a rule reads', async () => {
    const agents = [
      await newAgent(),
      await newAgent({ breaker: undefined }),
      await newAgent({ budget: { limits: [{ metric: 'total_tokens', window: 'hour', limit: 150 }] } }),
    ];
    const paused = await newAgent();
    await engine.agents.pause(paused, 'why', 'test');
    const lapsed = await newAgent();
    await ts.store.transaction((tx) => setLapseHold(tx, lapsed, ['x1', 'x2'], clock(), 'reaper'));
    const source = await newAgent();
    await engine.subscriptions.create({ source_agent: source, target_agent: agents[0]!, on: 'succeeded', message: 'next' }, 'test');
    const clean = await newAgent({
      breaker: { consecutive: 2, ratio: 1, window: 2, cooldown_ms: 60_000, max_cooldown_ms: 60_000, count: ['agent_error'] },
    });
    for (let i = 0; i < 2; i++) {
      await engine.submit(clean, { message: 'ok' }, 'test');
      const [row] = await engine.claim(clean, { owner: 'w' });
      await engine.complete(row!.id, row!.lease_token!, { status: 'succeeded' }, 'w');
    }
    const names = [...agents, paused, lapsed, source, clean];
    const kept = await Promise.all(names.map(facts));
    expect(kept.map((f) => f.complete)).toContain(1);
    expect(kept.map((f) => f.claim)).toContain(0);
    // The migration's UPDATE of agents, run again over what the engine wrote (its WHERE-less form).
    const file = STORE_KIND === 'postgres' ? 'postgres/0101_fast_path_facts.sql' : 'sqlite/0101_fast_path_facts.sql';
    const text = readFileSync(new URL(`../../src/store/migrations/${file}`, import.meta.url), 'utf8');
    const update = text.slice(text.indexOf('UPDATE agents'), text.indexOf(';', text.indexOf('UPDATE agents')));
    await ts.store.db.updateTable('agents').set({ fast_claim: 0, fast_complete: 0 }).where('name', 'in', names).execute();
    await sql.raw(update).execute(ts.store.db);
    expect(await Promise.all(names.map(facts))).toEqual(kept);
  });
});
