import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { spendOf, USAGE_MAX, windowOf, type Budget } from '../../src/domain/budget.ts';
import { Engine } from '../../src/engine/engine.ts';
import { createNodeMetrics } from '../../src/metrics.ts';
import { inProcessApi } from '../helpers/api.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { agentMaker } from '../helpers/agents.ts';

// Budgets: deterministic, on the manual clock, on both stores. The clock starts 2026-01-01T00:00Z.

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let n = 0;
let agent: string;
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'budget-test', backlogExpiryMs: 30 * DAY, alertSinks: ['webhook', 'slack'] });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

const makeAgent = agentMaker(
  () => engine,
  () => `budget-${++n}`,
  { max_backlog: 100 },
);
/** Makes a new agent with `budget` the one the file's helpers act on. */
const newAgent = async (budget: Budget | null, max_parallel = 2) => {
  agent = await makeAgent({ max_parallel, budget });
};
const submit = async (k = 1) => {
  for (let i = 0; i < k; i++) {
    clock.advance(1);
    await engine.submit(agent, { message: 'task' }, 'key:test');
  }
};
/** Claim one, let it run `ms`, complete it with `usage`. */
const run = async (usage: unknown, ms = 1000) => {
  const [row] = await engine.claim(agent, { owner: 'w1' });
  expect(row, 'a task was admitted').toBeDefined();
  clock.advance(ms);
  return engine.complete(row!.id, row!.lease_token!, { status: 'succeeded', usage }, 'w1');
};
const limitsOf = async () => (await engine.agents.budget(agent)).limits;
const alertRows = () =>
  ts.store.db
    .selectFrom('canary_alerts')
    .select(['sink', 'body'])
    .where('invariant', '=', 'budget')
    .where('body', 'like', `%${agent}%`)
    .orderBy('id')
    .execute();

describe('budget windows and spending (pure)', () => {
  it('windows start on the wall clock of the time zone, months and DST included', () => {
    const t = Date.UTC(2026, 2, 29, 12, 30); // 2026-03-29: Europe's clocks go forward at 01:00Z
    expect(windowOf(t, 'hour')).toEqual({ start: Date.UTC(2026, 2, 29, 12), end: Date.UTC(2026, 2, 29, 13) });
    expect(windowOf(t, 'month')).toEqual({ start: Date.UTC(2026, 2, 1), end: Date.UTC(2026, 3, 1) });
    // Berlin's 29 March lasts 23 hours: from 00:00 CET (23:00Z the day before) to 00:00 CEST (22:00Z).
    expect(windowOf(t, 'day', 'Europe/Berlin')).toEqual({ start: Date.UTC(2026, 2, 28, 23), end: Date.UTC(2026, 2, 29, 22) });
    // Half-hour zones: an hour window starts at the zone's full hour.
    expect(windowOf(Date.UTC(2026, 0, 1, 10, 10), 'hour', 'Asia/Kolkata').start).toBe(Date.UTC(2026, 0, 1, 9, 30));
    // New York's January ends at 05:00Z on 1 February.
    expect(windowOf(Date.UTC(2026, 1, 1, 4, 59), 'month', 'America/New_York')).toEqual({
      start: Date.UTC(2026, 0, 1, 5),
      end: Date.UTC(2026, 1, 1, 5),
    });
  });

  it('spending comes from usage (tokens: total, else input + output) and the duration', () => {
    expect(spendOf({ cost_usd: 0.5, total_tokens: 30, input_tokens: 1 }, 2500)).toEqual({ cost_usd: 0.5, total_tokens: 30, run_ms: 2500 });
    expect(spendOf({ input_tokens: 10, output_tokens: 5 }, null)).toEqual({ cost_usd: 0, total_tokens: 15, run_ms: 0 });
    expect(spendOf('not an object', 7)).toEqual({ cost_usd: 0, total_tokens: 0, run_ms: 7 });
    // A push target's answer is not validated by the API: what it reports is counted in whole tokens, up to the caps.
    expect(spendOf({ total_tokens: 1e19, cost_usd: 1.7e308 }, 0)).toEqual({
      cost_usd: USAGE_MAX.cost_usd,
      total_tokens: USAGE_MAX.tokens,
      run_ms: 0,
    });
    expect(spendOf({ input_tokens: 1.4, output_tokens: 2.6 }, 0)).toEqual({ cost_usd: 0, total_tokens: 4, run_ms: 0 });
  });
});

describe(`budgets in the engine (${STORE_KIND})`, () => {
  beforeEach(() => clock.set(Date.UTC(2026, 0, 10, 12)));

  it('spending accrues from usage and durations into the current windows', async () => {
    await newAgent({
      limits: [
        { metric: 'cost_usd', window: 'day', limit: 10 },
        { metric: 'total_tokens', window: 'hour', limit: 10_000 },
        { metric: 'run_seconds', window: 'month', limit: 3600 },
      ],
    });
    await submit(2);
    await run({ cost_usd: 0.25, input_tokens: 100, output_tokens: 50 }, 2000);
    await run({ cost_usd: 0.5, total_tokens: 1000 }, 3000);
    const limits = await limitsOf();
    expect(limits.map((l) => [l.metric, l.window, l.spent, l.remaining])).toEqual([
      ['cost_usd', 'day', 0.75, 9.25],
      ['total_tokens', 'hour', 1150, 8850],
      ['run_seconds', 'month', 5, 3595],
    ]);
    expect(limits[0]!.resets_at).toBe(Date.UTC(2026, 0, 11));
    expect(limits[1]!.resets_at).toBe(Date.UTC(2026, 0, 10, 13));
    // An agent without a budget writes no ledger rows.
    const before = await ts.store.db.selectFrom('agent_budget_ledger').select('agent').execute();
    await newAgent(null);
    await submit();
    await run({ cost_usd: 1 });
    expect(await ts.store.db.selectFrom('agent_budget_ledger').select('agent').execute()).toHaveLength(before.length);
    expect(await limitsOf()).toEqual([]);
  });

  it('a spent budget holds admission (running work finishes); the window rolling releases it', async () => {
    await newAgent({ limits: [{ metric: 'cost_usd', window: 'day', limit: 1 }] });
    await submit(4);
    const [a, b] = await engine.claim(agent, { owner: 'w1', max: 2 });
    clock.advance(1000);
    await engine.complete(a!.id, a!.lease_token!, { status: 'succeeded', usage: { cost_usd: 0.6 } }, 'w1');
    await engine.complete(b!.id, b!.lease_token!, { status: 'succeeded', usage: { cost_usd: 0.6 } }, 'w1');
    // Spent (1.2 of 1: the second task was already running when the first reached 60 %).
    expect(await engine.claim(agent, { owner: 'w1', max: 2 })).toEqual([]);
    const queued = await engine.submit(agent, { message: 'later' }, 'key:test');
    const w = (await engine.getExecution(queued.id)).waiting!;
    expect(w.reason).toBe('budget_spent');
    expect(w.budget).toEqual({ metric: 'cost_usd', window: 'day', limit: 1, spent: 1.2, resets_at: '2026-01-11T00:00:00.000Z' });
    expect(w.summary).toMatch(/cost_usd budget per day is spent \(1.2 of 1\)/);

    // Just before midnight still held; at midnight a new window starts at 0.
    clock.set(Date.UTC(2026, 0, 11) - 1);
    expect(await engine.claim(agent, { owner: 'w1' })).toEqual([]);
    clock.set(Date.UTC(2026, 0, 11));
    expect(await engine.claim(agent, { owner: 'w1' })).toHaveLength(1);
    expect((await limitsOf())[0]!.spent).toBe(0);
  });

  it('raising the limit releases a spent budget; lowering it below the spending holds again', async () => {
    await newAgent({ limits: [{ metric: 'total_tokens', window: 'hour', limit: 100 }] });
    await submit(3);
    await run({ total_tokens: 100 });
    expect(await engine.claim(agent, { owner: 'w1' })).toEqual([]);
    await engine.agents.update(agent, { budget: { limits: [{ metric: 'total_tokens', window: 'hour', limit: 150 }] } }, 'key:ops');
    await run({ total_tokens: 60 });
    expect(await engine.claim(agent, { owner: 'w1' })).toEqual([]);
    // Removing the budget lifts every limit.
    await engine.agents.update(agent, { budget: null }, 'key:ops');
    expect(await engine.claim(agent, { owner: 'w1' })).toHaveLength(1);
  });

  it('an agent deleted and created again under its name starts its budget at 0', async () => {
    const budget: Budget = { limits: [{ metric: 'total_tokens', window: 'day', limit: 10 }] };
    await newAgent(budget);
    await submit(2);
    await run({ total_tokens: 10 });
    expect(await engine.claim(agent, { owner: 'w1' })).toEqual([]);
    await engine.agents.delete(agent, 'test');
    await engine.agents.create({ name: agent, budget }, 'test');
    expect((await limitsOf())[0]!.spent).toBe(0);
    await submit();
    expect(await engine.claim(agent, { owner: 'w1' })).toHaveLength(1);
  });

  it('run time counts toward run_seconds, failed runs included', async () => {
    await newAgent({ limits: [{ metric: 'run_seconds', window: 'hour', limit: 10 }] });
    await submit(3);
    const [row] = await engine.claim(agent, { owner: 'w1' });
    clock.advance(6000);
    await engine.complete(row!.id, row!.lease_token!, { status: 'failed', error: { code: 'failed', message: 'boom' } }, 'w1');
    expect((await limitsOf())[0]!.spent).toBe(6);
    await run(undefined, 4000);
    expect(await engine.claim(agent, { owner: 'w1' })).toEqual([]);
  });

  it('a run the reaper ends at its timeout counts its run time', async () => {
    agent = `budget-${++n}`;
    await engine.agents.create(
      { name: agent, max_parallel: 1, timeout_seconds: 5, budget: { limits: [{ metric: 'run_seconds', window: 'hour', limit: 5 }] } },
      'test',
    );
    await submit(2);
    await engine.claim(agent, { owner: 'w1' });
    clock.advance(5_001);
    await engine.reapOnce();
    expect((await limitsOf())[0]!.spent).toBeCloseTo(5.001, 3);
    expect(await engine.claim(agent, { owner: 'w1' })).toEqual([]);
  });

  it('at 80 % an alert is queued once per window, through each configured sink', async () => {
    await newAgent({ limits: [{ metric: 'cost_usd', window: 'hour', limit: 10 }] });
    await submit(6);
    await run({ cost_usd: 7.9 });
    expect(await alertRows()).toEqual([]);
    await run({ cost_usd: 0.1 }); // 8.0: 80 %
    const first = await alertRows();
    expect(first.map((r) => r.sink).sort()).toEqual(['slack', 'webhook']);
    const body = JSON.parse(first.find((r) => r.sink === 'webhook')!.body);
    expect(body).toMatchObject({ event: 'budget.threshold', agent, metric: 'cost_usd', window: 'hour', limit: 10, spent: 8 });
    await run({ cost_usd: 1 }); // 90 %: same window, no second alert
    expect(await alertRows()).toHaveLength(2);
    clock.set(Date.UTC(2026, 0, 10, 13)); // the next hour
    await run({ cost_usd: 8.5 });
    expect(await alertRows()).toHaveLength(4);
  });

  it("a month window in a non-UTC zone rolls at that zone's midnight", async () => {
    await newAgent({ time_zone: 'America/New_York', limits: [{ metric: 'cost_usd', window: 'month', limit: 5 }] });
    // 04:30Z on 1 February is still 31 January, 23:30 in New York.
    clock.set(Date.UTC(2026, 1, 1, 4, 30));
    await submit(3);
    await run({ cost_usd: 5 });
    expect(await engine.claim(agent, { owner: 'w1' })).toEqual([]);
    const [l] = await limitsOf();
    expect(l!.window_start).toBe(Date.UTC(2026, 0, 1, 5));
    expect(l!.resets_at).toBe(Date.UTC(2026, 1, 1, 5));
    // UTC's February began hours ago; New York's begins at 05:00Z, and only then it admits.
    clock.set(Date.UTC(2026, 1, 1, 4, 59));
    expect(await engine.claim(agent, { owner: 'w1' })).toEqual([]);
    clock.set(Date.UTC(2026, 1, 1, 5));
    expect(await engine.claim(agent, { owner: 'w1' })).toHaveLength(1);
  });
});

describe(`budgets in /metrics (${STORE_KIND})`, () => {
  it('baton_agent_budget_spent_ratio per agent, metric and window', async () => {
    clock.set(Date.UTC(2026, 0, 10, 12));
    await newAgent({ limits: [{ metric: 'cost_usd', window: 'day', limit: 4 }] });
    await submit();
    await run({ cost_usd: 1 });
    const metrics = createNodeMetrics(engine);
    try {
      const body = (await metrics.render()).body;
      expect(body).toContain(`baton_agent_budget_spent_ratio{agent="${agent}",metric="cost_usd",window="day"} 0.25`);
    } finally {
      metrics.close();
    }
  });
});

describe(`budgets over HTTP (${STORE_KIND})`, () => {
  const { call } = inProcessApi(() => engine);

  it('sets a budget with the agent and shows limit, spent, remaining and resets_at', async () => {
    clock.set(Date.UTC(2026, 0, 10, 12));
    const name = `budget-http-${++n}`;
    const budget = { time_zone: 'Europe/Berlin', limits: [{ metric: 'cost_usd', window: 'day', limit: 2 }] };
    const c = await call('POST', '/v1/agents', { name, budget });
    expect(c.status).toBe(201);
    expect(c.body.budget).toEqual(budget);
    agent = name;
    await submit();
    await run({ cost_usd: 0.5 });
    const b = await call('GET', `/v1/agents/${name}/budget`);
    expect(b.status).toBe(200);
    expect(b.body).toEqual({
      agent: name,
      time_zone: 'Europe/Berlin',
      spent: false,
      limits: [
        {
          metric: 'cost_usd',
          window: 'day',
          limit: 2,
          spent: 0.5,
          remaining: 1.5,
          spent_ratio: 0.25,
          window_start: '2026-01-09T23:00:00.000Z',
          resets_at: '2026-01-10T23:00:00.000Z',
        },
      ],
    });
    const p = await call('PATCH', `/v1/agents/${name}`, { budget: null });
    expect(p.status).toBe(200);
    expect(p.body.budget).toBeNull();
    expect((await call('GET', `/v1/agents/${name}/budget`)).body).toEqual({ agent: name, time_zone: 'UTC', spent: false, limits: [] });
    expect((await call('GET', '/v1/agents/no-such-agent/budget')).body.error).toBe('not_found');
  });

  it('refuses a bad budget with a 400 naming the field', async () => {
    const name = `budget-bad-${++n}`;
    const bad = async (budget: unknown, field: RegExp) => {
      const r = await call('POST', '/v1/agents', { name, budget });
      expect(r.status, JSON.stringify(budget)).toBe(400);
      expect(r.body.error).toBe('validation_error');
      expect(r.body.message).toMatch(field);
    };
    await bad({ time_zone: 'Mars/Olympus', limits: [{ metric: 'cost_usd', window: 'day', limit: 1 }] }, /time_zone/);
    await bad({ limits: [{ metric: 'dollars', window: 'day', limit: 1 }] }, /metric/);
    await bad({ limits: [{ metric: 'cost_usd', window: 'week', limit: 1 }] }, /window/);
    await bad({ limits: [{ metric: 'cost_usd', window: 'day', limit: 0 }] }, /limit/);
    await bad({ limits: [] }, /limits/);
    await bad(
      {
        limits: [
          { metric: 'cost_usd', window: 'day', limit: 1 },
          { metric: 'cost_usd', window: 'day', limit: 2 },
        ],
      },
      /limits/,
    );
    await bad({ limits: [{ metric: 'cost_usd', window: 'day', limit: 1 }], extra: 1 }, /budget/);
    expect((await call('GET', `/v1/agents/${name}`)).status).toBe(404);
  });

  it("refuses usage a ledger cannot count with a 400 naming the field; the task stays the worker's to complete", async () => {
    // Fractional or 20-digit token counts were a 500 on PostgreSQL (a bigint column), and the task stayed running.
    const name = `budget-usage-${++n}`;
    expect(
      (await call('POST', '/v1/agents', { name, budget: { limits: [{ metric: 'total_tokens', window: 'day', limit: 1000 }] } })).status,
    ).toBe(201);
    agent = name;
    await submit();
    const [row] = await engine.claim(agent, { owner: 'w1' });
    const complete = (usage: unknown) =>
      call('POST', `/v1/executions/${row!.id}/complete`, { lease_token: row!.lease_token, status: 'succeeded', usage });
    for (const [usage, field] of [
      [{ total_tokens: 1.5 }, 'body.usage.total_tokens'],
      [{ total_tokens: 1e19 }, 'body.usage.total_tokens'],
      [{ input_tokens: 9e18, output_tokens: 9e18 }, 'body.usage.input_tokens'],
      [{ cost_usd: 1.7e308 }, 'body.usage.cost_usd'],
    ] as const) {
      const r = await complete(usage);
      expect({ status: r.status, error: r.body.error }, JSON.stringify(usage)).toEqual({ status: 400, error: 'validation_error' });
      expect(r.body.message).toContain(field);
    }
    const ok = await complete({ total_tokens: USAGE_MAX.tokens, cost_usd: USAGE_MAX.cost_usd });
    expect(ok.status).toBe(200);
    expect((await call('GET', `/v1/agents/${name}/budget`)).body.limits[0]).toMatchObject({ spent: USAGE_MAX.tokens });
  });
});
