/**
 * Budgets through the real `baton` command (a child process) and the MCP tools (over Streamable
 * HTTP), against a server started in this process.
 */
import { describe, expect, it } from 'vitest';
import { cliNode } from '../helpers/cli-node.ts';
import { SPAWN_TIMEOUT_MS } from '../helpers/process.ts';
import { STORE_KIND } from '../helpers/store.ts';

const s = cliNode('budget-cli-test', { mcp: true });
const { baton, ok, tool } = s;

describe(`budgets: CLI and MCP (${STORE_KIND})`, { timeout: 4 * SPAWN_TIMEOUT_MS }, () => {
  it('baton agents create --budget-json, agents budget (words and --json), a bad budget names its field; MCP get_budget', async () => {
    const agent = 'cli-budget';
    const budget = { limits: [{ metric: 'total_tokens', window: 'day', limit: 100 }] };
    await ok(['agents', 'create', agent, '--budget-json', JSON.stringify(budget)]);
    await s.node.engine.submit(agent, { message: 'spend' }, 'test');
    const [row] = await s.node.engine.claim(agent, { owner: 'w' });
    await s.node.engine.complete(row!.id, row!.lease_token!, { status: 'succeeded', usage: { total_tokens: 100 } }, 'w');
    const waiting = await s.node.engine.submit(agent, { message: 'waits' }, 'test');

    const [words, asJson, why, bad, show] = await Promise.all([
      ok(['agents', 'budget', agent]),
      ok(['agents', 'budget', agent, '--json']),
      ok(['why', waiting.id]),
      baton(['agents', 'update', agent, '--budget-json', '{"limits":[{"metric":"dollars","window":"day","limit":1}]}']),
      ok(['agents', 'show', agent]),
    ]);
    expect(words).toContain('SPENT');
    expect(words).toMatch(/total_tokens\s+day\s+100\s+100 \(100 %\)\s+0/);
    expect(JSON.parse(asJson)).toMatchObject({
      agent,
      time_zone: 'UTC',
      spent: true,
      limits: [{ metric: 'total_tokens', spent: 100, remaining: 0 }],
    });
    expect(why).toContain(`${waiting.id} is queued: budget_spent`);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/metric/);
    expect(show).toContain('total_tokens 100/day');

    const m = await tool('get_budget', { agent });
    expect(m.isError).toBeFalsy();
    expect(m.structuredContent).toMatchObject({ agent, spent: true, limits: [{ metric: 'total_tokens', window: 'day', limit: 100 }] });
    const g = await tool('get_execution', { execution_id: waiting.id });
    expect(g.structuredContent.waiting).toMatchObject({
      reason: 'budget_spent',
      budget: { metric: 'total_tokens', limit: 100, spent: 100 },
    });

    // Raising the limit from the CLI releases it.
    await ok(['agents', 'update', agent, '--budget-json', '{"limits":[{"metric":"total_tokens","window":"day","limit":1000}]}']);
    expect(JSON.parse(await ok(['agents', 'budget', agent, '--json'])).spent).toBe(false);
    expect(await s.node.engine.claim(agent, { owner: 'w' })).toHaveLength(1);
  });

  it('cost is counted in micro-dollars: three completions of 0.40 against 1 a day are spent 1.2 on the API, CLI, MCP and in why', async () => {
    const agent = 'cli-budget-cost';
    await ok(['agents', 'create', agent, '--budget-json', JSON.stringify({ limits: [{ metric: 'cost_usd', window: 'day', limit: 1 }] })]);
    for (let i = 0; i < 3; i++) {
      await s.node.engine.submit(agent, { message: `spend ${i}` }, 'test');
      const [row] = await s.node.engine.claim(agent, { owner: 'w' });
      await s.node.engine.complete(row!.id, row!.lease_token!, { status: 'succeeded', usage: { cost_usd: 0.4 } }, 'w');
    }
    const waiting = await s.node.engine.submit(agent, { message: 'waits' }, 'test');
    const [words, asJson, why, whyJson] = await Promise.all([
      ok(['agents', 'budget', agent]),
      ok(['agents', 'budget', agent, '--json']),
      ok(['why', waiting.id]),
      ok(['why', waiting.id, '--json']),
    ]);
    const everything = [words, asJson, why, whyJson].join('\n');
    expect(everything).not.toMatch(/\d\.\d{7,}/); // no binary-fraction tail anywhere
    expect(words).toMatch(/cost_usd\s+day\s+1\s+1\.2 \(120 %\)\s+0/);
    expect(JSON.parse(asJson)).toMatchObject({ spent: true, limits: [{ metric: 'cost_usd', spent: 1.2, remaining: 0 }] });
    expect(why).toContain('is spent (1.2 of 1)');
    expect(JSON.parse(whyJson).waiting.budget).toMatchObject({ metric: 'cost_usd', limit: 1, spent: 1.2 });
    const m = await tool('get_budget', { agent });
    expect(m.structuredContent).toMatchObject({ limits: [{ metric: 'cost_usd', spent: 1.2, remaining: 0 }] });
    expect(JSON.stringify(m)).not.toMatch(/\d\.\d{7,}/);
    const g = await tool('get_execution', { execution_id: waiting.id });
    expect(g.structuredContent.waiting.budget).toMatchObject({ spent: 1.2 });
    expect(JSON.stringify(g)).not.toMatch(/\d\.\d{7,}/);

    // Two more at 0.1 after a raised limit: 1.4, and 0.6 remaining (not 0.6000000000000001 or 0.5999999999999999).
    await ok(['agents', 'update', agent, '--budget-json', JSON.stringify({ limits: [{ metric: 'cost_usd', window: 'day', limit: 2 }] })]);
    await s.node.engine.cancel(waiting.id, 'test');
    for (let i = 0; i < 2; i++) {
      await s.node.engine.submit(agent, { message: `dime ${i}` }, 'test');
      const [row] = await s.node.engine.claim(agent, { owner: 'w' });
      await s.node.engine.complete(row!.id, row!.lease_token!, { status: 'succeeded', usage: { cost_usd: 0.1 } }, 'w');
    }
    expect(JSON.parse(await ok(['agents', 'budget', agent, '--json'])).limits[0]).toMatchObject({ spent: 1.4, remaining: 0.6 });
  });
});
