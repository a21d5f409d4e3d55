/**
 * Pause, resume and `baton why` through the real `baton` command (a child process) and the MCP
 * tools (over Streamable HTTP), against a server started in this process.
 */
import { describe, expect, it } from 'vitest';
import { cliNode } from '../helpers/cli-node.ts';
import { SPAWN_TIMEOUT_MS } from '../helpers/process.ts';
import { STORE_KIND } from '../helpers/store.ts';

const s = cliNode('admission-cli-test', { mcp: true });
const { baton, ok, tool } = s;

describe(`pause, resume and why: CLI and MCP (${STORE_KIND})`, { timeout: 4 * SPAWN_TIMEOUT_MS }, () => {
  it('baton agents pause / list / get / resume and baton why, in words and --json', async () => {
    const agent = 'cli-paused';
    await s.node.engine.agents.create({ name: agent, max_parallel: 1 }, 'test');
    const [paused, ex] = await Promise.all([
      ok(['agents', 'pause', agent, '--reason', 'key rotation']),
      s.node.engine.submit(agent, { message: 'waits' }, 'test'),
    ]);
    expect(paused).toMatch(new RegExp(`agent ${agent} paused since .* by key:\\S+: key rotation`));

    const second = await s.node.engine.submit(agent, { message: 'waits behind it' }, 'test');
    const [list, get, why, whyJson, noReason, whySecond] = await Promise.all([
      ok(['agents', 'list']),
      ok(['agents', 'get', agent, '--json']),
      ok(['why', ex.id]),
      ok(['why', ex.id, '--json']),
      baton(['agents', 'pause', agent]),
      ok(['why', second.id]),
    ]);
    // How many are ahead is said once, in the summary.
    expect(whySecond).toContain('(1 ahead of it in the queue)');
    expect(whySecond).not.toContain('Ahead of it');
    expect(list).toMatch(/paused/);
    expect(list).toContain('key rotation');
    expect(JSON.parse(get).paused).toMatchObject({ reason: 'key rotation' });
    expect(why).toContain(`${ex.id} is queued: agent_paused`);
    expect(why).toContain('"key rotation"');
    expect(why).toMatch(/backlog_expired at/);
    expect(JSON.parse(whyJson)).toMatchObject({ id: ex.id, status: 'queued', waiting: { reason: 'agent_paused' } });
    expect(noReason.code).not.toBe(0);
    expect(noReason.stderr).toMatch(/--reason/);

    expect(await ok(['agents', 'resume', agent])).toContain(`agent ${agent} resumed (2 queued)`);
    const [row] = await s.node.engine.claim(agent, { owner: 'w' });
    expect(row!.id).toBe(ex.id);
    expect(await ok(['why', ex.id])).toContain(`${ex.id} is running: it is not waiting.`);
  });

  it('baton agents create --breaker-json sets the breaker, update --breaker-json null turns it off, a bad one names its field', async () => {
    const agent = 'cli-breaker';
    const breaker = { consecutive: 2, ratio: 0.5, window: 10, cooldown_ms: 60_000, max_cooldown_ms: 120_000, count: ['agent_error'] };
    await ok(['agents', 'create', agent, '--breaker-json', JSON.stringify(breaker)]);
    expect(JSON.parse(await ok(['agents', 'show', agent, '--json'])).breaker).toMatchObject({ config: breaker, state: 'closed' });
    const bad = await baton(['agents', 'update', agent, '--breaker-json', '{"consecutive":0}']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/consecutive/);
    await ok(['agents', 'update', agent, '--breaker-json', 'null']);
    expect(JSON.parse(await ok(['agents', 'show', agent, '--json'])).breaker).toBeNull();
  });

  it('MCP pause_agent / resume_agent, and get_execution carries waiting', async () => {
    const agent = 'mcp-paused';
    await s.node.engine.agents.create({ name: agent, max_parallel: 1 }, 'test');
    const p = await tool('pause_agent', { agent, reason: 'budget review' });
    expect(p.isError).toBeFalsy();
    expect(p.structuredContent).toMatchObject({ agent, paused: { reason: 'budget review' } });
    const again = await tool('pause_agent', { agent, reason: 'other' });
    expect(again.structuredContent.paused).toEqual(p.structuredContent.paused);

    const ex = await s.node.engine.submit(agent, { message: 'waits' }, 'test');
    const g = await tool('get_execution', { execution_id: ex.id });
    expect(g.structuredContent.waiting).toMatchObject({ reason: 'agent_paused', paused: { reason: 'budget review' } });
    const listed = await tool('list_agents', {});
    expect(listed.structuredContent.agents.find((a: any) => a.name === agent).paused).toMatchObject({ reason: 'budget review' });

    const r = await tool('resume_agent', { agent });
    expect(r.structuredContent).toMatchObject({ agent, paused: null, queued: 1 });
    const missing = await tool('pause_agent', { agent: 'no-such-agent', reason: 'x' });
    expect(missing.isError).toBe(true);
    expect(missing.content[0]!.text).toMatch(/^not_found:/);
  });
});
