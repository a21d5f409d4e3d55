import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BREAKER_DEFAULTS, type BreakerConfig } from '../../src/domain/breaker.ts';
import { Engine } from '../../src/engine/engine.ts';
import { createNodeMetrics } from '../../src/metrics.ts';
import { inProcessApi } from '../helpers/api.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { agentMaker } from '../helpers/agents.ts';

// The circuit breaker (src/domain/breaker.ts): deterministic, on the manual clock, on both stores.

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let n = 0;
const DAY = 86_400_000;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'breaker-test', backlogExpiryMs: DAY, alertSinks: ['webhook', 'slack'] });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

const CONFIG: BreakerConfig = {
  consecutive: 3,
  ratio: 1,
  window: 10,
  cooldown_ms: 1_000,
  max_cooldown_ms: 3_000,
  count: ['agent_error', 'timeout', 'poisoned'],
};

const makeAgent = agentMaker(
  () => engine,
  () => `brk-${++n}`,
  { max_parallel: 4, max_backlog: 100 },
);
/** An agent with the file's breaker under `breaker`, or none when null. */
const newAgent = (breaker: Partial<BreakerConfig> | null = {}, extra: { max_parallel?: number; timeout_seconds?: number } = {}) =>
  makeAgent({ ...extra, breaker: breaker === null ? null : { ...CONFIG, ...breaker } });
const submit = (agent: string, count = 1) =>
  Promise.all(Array.from({ length: count }, (_, i) => (clock.advance(1), engine.submit(agent, { message: `t${i}` }, 'key:test'))));

/** Claim one and end it: 'ok' succeeds, 'fail' fails as the agent's error, 'cancel' is cancelled. */
async function run(agent: string, how: 'ok' | 'fail' | 'cancel') {
  const [row] = await engine.claim(agent, { owner: 'w' });
  if (!row) throw new Error(`nothing admitted for ${agent}`);
  clock.advance(10);
  if (how === 'cancel') {
    // An operator cancels; the worker stops and reports it (the row ends cancelled).
    await engine.cancel(row.id, 'key:test');
    return engine.complete(row.id, row.lease_token!, { status: 'cancelled' }, 'w');
  }
  return engine.complete(
    row.id,
    row.lease_token!,
    how === 'ok' ? { status: 'succeeded' } : { status: 'failed', error: { code: 'model_error', message: 'HTTP 401' } },
    'w',
  );
}
const breaker = async (agent: string) => (await engine.agents.get(agent)).agent;
const changes = async (agent: string) =>
  (
    await ts.store.db
      .selectFrom('audit_log')
      .select(['actor', 'detail'])
      .where('action', '=', 'agent.breaker')
      .where('subject', '=', agent)
      .orderBy('id')
      .execute()
  ).map(
    (r) =>
      ({ actor: r.actor, ...JSON.parse(r.detail!) }) as {
        actor: string;
        from: string;
        to: string;
        why: string;
        cooldown_ms: number | null;
      },
  );

describe(`circuit breaker (${STORE_KIND})`, () => {
  it('opens after K consecutive counted failures, admits nothing while open, says why, audits and alerts', async () => {
    const agent = await newAgent();
    await submit(agent, 6);
    await run(agent, 'fail');
    await run(agent, 'ok'); // a success resets the run of failures
    await run(agent, 'fail');
    await run(agent, 'fail');
    expect((await breaker(agent)).breaker_state).toBe('closed');
    await run(agent, 'fail');
    const row = await breaker(agent);
    expect(row).toMatchObject({
      breaker_state: 'open',
      breaker_opened_at: clock(),
      breaker_until: clock() + 1_000,
      breaker_cooldown_ms: 1_000,
    });
    expect(await engine.claim(agent, { owner: 'w', max: 4 })).toEqual([]);

    const queued = await ts.store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', agent)
      .where('status', '=', 'queued')
      .execute();
    expect(queued).toHaveLength(1); // the backlog survives
    const waiting = (await engine.getExecution(queued[0]!.id)).waiting!;
    expect(waiting.reason).toBe('breaker_open');
    expect(waiting.breaker).toEqual({ until: new Date(clock() + 1_000).toISOString(), probe_id: null });
    expect(waiting.summary).toMatch(/circuit breaker is open/);

    expect(await changes(agent)).toEqual([
      expect.objectContaining({ actor: 'w', from: 'closed', to: 'open', why: 'consecutive_failures' }),
    ]);
    const alerts = await ts.store.db
      .selectFrom('canary_alerts')
      .select(['sink', 'transition', 'body'])
      .where('invariant', '=', 'agent.breaker')
      .execute();
    const mine = alerts.filter((a) => a.body.includes(agent));
    expect(mine.map((a) => [a.sink, a.transition]).sort()).toEqual([
      ['slack', 'violated'],
      ['webhook', 'violated'],
    ]);
    expect(JSON.parse(mine.find((a) => a.sink === 'webhook')!.body)).toMatchObject({
      event: 'agent.breaker.open',
      agent,
      why: 'consecutive_failures',
    });
  });

  it('opens when the failure ratio over the last N counted completions reaches the threshold, outcomes not yet counted being successes', async () => {
    const agent = await newAgent({ consecutive: 100, ratio: 0.5, window: 4 });
    await submit(agent, 8);
    for (const how of ['fail', 'ok'] as const) await run(agent, how);
    // 1 of 1 failed, but the window is 4: s s f s, 1 of 4.
    expect(await breaker(agent)).toMatchObject({ breaker_state: 'closed', breaker_recent: '0010' });
    await run(agent, 'fail');
    // s f s f = 0.5 ≥ 0.5, after three outcomes.
    expect(await breaker(agent)).toMatchObject({ breaker_state: 'open' });
    expect((await changes(agent)).map((c) => c.why)).toEqual(['failure_ratio']);
  });

  it("starts a new agent's window full of successes: its successes leave the row as it is, on the fast path", async () => {
    const agent = await newAgent({ consecutive: 100, ratio: 0.5, window: 4 });
    await submit(agent, 2);
    expect(await breaker(agent)).toMatchObject({ breaker_recent: '0000' });
    const facts = await ts.store.db.selectFrom('agents').select('fast_complete').where('name', '=', agent).executeTakeFirstOrThrow();
    expect(Number(facts.fast_complete)).toBe(1);
    await run(agent, 'ok');
    expect(await breaker(agent)).toMatchObject({ breaker_state: 'closed', breaker_recent: '0000', breaker_consecutive: 0 });
    // Closed by hand, counts start afresh: the first outcome writes the window full again.
    await engine.agents.closeBreaker(agent, 'test');
    expect(await breaker(agent)).toMatchObject({ breaker_recent: '' });
    await run(agent, 'ok');
    expect(await breaker(agent)).toMatchObject({ breaker_recent: '0000' });
  });

  it('keeps only the last N outcomes in the row (no scan of history)', async () => {
    const agent = await newAgent({ consecutive: 100, ratio: 0.9, window: 3 });
    await submit(agent, 5);
    for (const how of ['fail', 'ok', 'ok', 'fail', 'ok'] as const) await run(agent, how);
    expect(await breaker(agent)).toMatchObject({ breaker_state: 'closed', breaker_recent: '010', breaker_consecutive: 0 });
  });

  it('counts only the configured classes, and never cancellations', async () => {
    const agent = await newAgent({ count: ['timeout'] }, { timeout_seconds: 5 });
    await submit(agent, 11);
    for (let i = 0; i < 4; i++) await run(agent, 'fail'); // agent errors: not counted here
    for (let i = 0; i < 4; i++) await run(agent, 'cancel'); // cancellations: never counted
    expect(await breaker(agent)).toMatchObject({ breaker_state: 'closed', breaker_consecutive: 0, breaker_recent: '0'.repeat(10) });
    // Three timeouts, ended by the reaper: they count, in the reaper's transaction.
    const claimed = await engine.claim(agent, { owner: 'w', max: 2 });
    expect(claimed).toHaveLength(2);
    clock.advance(6_000);
    await engine.reapOnce();
    expect(await breaker(agent)).toMatchObject({ breaker_state: 'closed', breaker_consecutive: 2 });
    await engine.claim(agent, { owner: 'w' });
    clock.advance(6_000);
    await engine.reapOnce();
    expect(await breaker(agent)).toMatchObject({ breaker_state: 'open' });
    expect(await changes(agent)).toEqual([expect.objectContaining({ actor: 'reaper:breaker-test', to: 'open' })]);
  });

  it('half-open admits exactly one probe; its success closes the breaker', async () => {
    const agent = await newAgent();
    await submit(agent, 8);
    for (let i = 0; i < 3; i++) await run(agent, 'fail');
    clock.advance(999);
    expect(await engine.claim(agent, { owner: 'w', max: 4 })).toEqual([]); // 1 ms of cool-down left
    clock.advance(1);
    const probe = await engine.claim(agent, { owner: 'w', max: 4 });
    expect(probe).toHaveLength(1);
    expect(await breaker(agent)).toMatchObject({ breaker_state: 'half_open', breaker_probe_id: probe[0]!.id });
    expect(await engine.claim(agent, { owner: 'w2', max: 4 })).toEqual([]); // the probe is out: nothing else
    const [anyQueued] = await ts.store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', agent)
      .where('status', '=', 'queued')
      .execute();
    expect((await engine.getExecution(anyQueued!.id)).waiting).toMatchObject({
      reason: 'breaker_open',
      breaker: { until: null, probe_id: probe[0]!.id },
    });

    await engine.complete(probe[0]!.id, probe[0]!.lease_token!, { status: 'succeeded' }, 'w');
    expect(await breaker(agent)).toMatchObject({
      breaker_state: 'closed',
      breaker_probe_id: null,
      breaker_until: null,
      breaker_cooldown_ms: null,
    });
    expect(await engine.claim(agent, { owner: 'w', max: 4 })).toHaveLength(4);
    expect((await changes(agent)).map((c) => `${c.from}>${c.to}:${c.why}`)).toEqual([
      'closed>open:consecutive_failures',
      'open>half_open:cooldown_elapsed',
      'half_open>closed:probe_succeeded',
    ]);
  });

  it('a failed probe re-opens it with the cool-down doubled, capped at max_cooldown_ms', async () => {
    const agent = await newAgent();
    await submit(agent, 10);
    for (let i = 0; i < 3; i++) await run(agent, 'fail');
    const seen: number[] = [];
    for (let i = 0; i < 3; i++) {
      clock.advance(Number((await breaker(agent)).breaker_cooldown_ms));
      await run(agent, 'fail'); // the probe fails
      const row = await breaker(agent);
      expect(row.breaker_state).toBe('open');
      expect(row.breaker_until).toBe(clock() + Number(row.breaker_cooldown_ms));
      seen.push(Number(row.breaker_cooldown_ms));
    }
    expect(seen).toEqual([2_000, 3_000, 3_000]);
    expect((await changes(agent)).filter((c) => c.why === 'probe_failed').map((c) => c.cooldown_ms)).toEqual([2_000, 3_000, 3_000]);
  });

  it('a probe that ends without a verdict (cancelled) frees the slot for another probe', async () => {
    const agent = await newAgent();
    await submit(agent, 6);
    for (let i = 0; i < 3; i++) await run(agent, 'fail');
    clock.advance(1_000);
    await run(agent, 'cancel');
    // The probe slot is judged by the probe's status at the next admission: it no longer runs.
    expect(await breaker(agent)).toMatchObject({ breaker_state: 'half_open' });
    const next = await engine.claim(agent, { owner: 'w', max: 4 });
    expect(next).toHaveLength(1);
    expect((await breaker(agent)).breaker_probe_id).toBe(next[0]!.id);
  });

  it('an operator closes it by hand: admission resumes at once, counts start afresh', async () => {
    const agent = await newAgent();
    await submit(agent, 6);
    for (let i = 0; i < 3; i++) await run(agent, 'fail');
    const closed = await engine.agents.closeBreaker(agent, 'key:ops');
    expect(closed.changed).toBe(true);
    expect(closed.agent).toMatchObject({ breaker_state: 'closed', breaker_consecutive: 0, breaker_recent: '' });
    expect(await engine.claim(agent, { owner: 'w', max: 4 })).toHaveLength(3);
    expect((await engine.agents.closeBreaker(agent, 'key:ops')).changed).toBe(false);
    expect((await changes(agent)).at(-1)).toMatchObject({ actor: 'key:ops', from: 'open', to: 'closed', why: 'closed_by_operator' });
  });

  it('is on with the documented defaults for new agents, off when null and for agents from before 0011', async () => {
    const fresh = `brk-${++n}`;
    await engine.agents.create({ name: fresh }, 'test');
    expect(JSON.parse((await breaker(fresh)).breaker_config!)).toEqual(BREAKER_DEFAULTS);
    expect(BREAKER_DEFAULTS).toMatchObject({ consecutive: 5, ratio: 0.5, window: 20, cooldown_ms: 30_000, max_cooldown_ms: 600_000 });

    // An agent row as it stood before the breaker existed: the column's default leaves it off.
    const old = `brk-${++n}`;
    await ts.store.db
      .insertInto('agents')
      .values({
        name: old,
        max_parallel: 4,
        max_backlog: 100,
        timeout_seconds: 60,
        lease_ttl_seconds: 30,
        max_redeliveries: 3,
        delivery: 'pull',
        push_url: null,
        push_secret: null,
        description: null,
        created_at: clock(),
        updated_at: clock(),
      })
      .execute();
    const off = await newAgent(null);
    for (const agent of [old, off]) {
      expect((await breaker(agent)).breaker_config).toBeNull();
      await submit(agent, 8);
      for (let i = 0; i < 8; i++) await run(agent, 'fail');
      expect(await breaker(agent)).toMatchObject({ breaker_state: 'closed', breaker_consecutive: 0 });
    }
  });
});

describe(`circuit breaker over HTTP and in /metrics (${STORE_KIND})`, () => {
  const { call } = inProcessApi(() => engine);

  it('shows the breaker on the agent, closes it by hand, validates its config, and exports the gauge', async () => {
    const agent = await newAgent();
    await submit(agent, 4);
    for (let i = 0; i < 3; i++) await run(agent, 'fail');
    const shown = await call('GET', `/v1/agents/${agent}`);
    expect(shown.body.breaker).toMatchObject({
      state: 'open',
      config: CONFIG,
      until: new Date(clock() + 1_000).toISOString(),
      cooldown_ms: 1_000,
    });

    const metrics = createNodeMetrics(engine);
    try {
      expect((await metrics.render()).body).toContain(`baton_agent_breaker_state{agent="${agent}"} 1`);
    } finally {
      metrics.close();
    }

    const closed = await call('POST', `/v1/agents/${agent}/breaker/close`);
    expect(closed.status).toBe(200);
    expect(closed.body.breaker).toMatchObject({ state: 'closed', consecutive_failures: 0 });
    expect((await call('POST', '/v1/agents/no-such-agent/breaker/close')).body.error).toBe('not_found');

    const bad = await call('PATCH', `/v1/agents/${agent}`, { breaker: { ...CONFIG, ratio: 2 } });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toBe('validation_error');
    expect(bad.body.message).toMatch(/breaker/);
    const off = await call('PATCH', `/v1/agents/${agent}`, { breaker: null });
    expect(off.status).toBe(200);
    expect(off.body.breaker).toBeNull();
  });
});
