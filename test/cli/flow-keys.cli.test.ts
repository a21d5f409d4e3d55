/**
 * Concurrency keys through the real `baton` command (a child process) and the MCP run_task tool
 * (over Streamable HTTP), against a server started in this process.
 */
import { describe, expect, it } from 'vitest';
import { cliNode } from '../helpers/cli-node.ts';
import { SPAWN_TIMEOUT_MS } from '../helpers/process.ts';
import { STORE_KIND } from '../helpers/store.ts';

const s = cliNode('keys-cli-test', { mcp: true });
const { baton, ok, tool } = s;

describe(`concurrency keys: CLI and MCP (${STORE_KIND})`, { timeout: 4 * SPAWN_TIMEOUT_MS }, () => {
  it('baton run --concurrency-key/--debounce/--singleton, baton agents keys, baton why key_busy; MCP run_task with a key', async () => {
    const agent = 'cli-keys';
    await ok(['agents', 'create', agent, '--max-parallel', '5', '--key-max-parallel', '1']);
    await ok(['agents', 'update', agent, '--key-overrides-json', '{"user:big":2}', '--key-throttle', '100/60+5']);
    const limits = JSON.parse(await ok(['agents', 'show', agent, '--json']));
    expect(limits.keys).toEqual({
      key_max_parallel: 1,
      key_overrides: { 'user:big': 2 },
      key_throttle: { limit: 100, period_seconds: 60, burst: 5 },
    });
    await ok(['agents', 'update', agent, '--key-overrides-json', 'null', '--key-throttle', 'none']);
    expect(JSON.parse(await ok(['agents', 'show', agent, '--json'])).keys).toEqual({
      key_max_parallel: 1,
      key_overrides: null,
      key_throttle: null,
    });
    const first = (await ok(['run', agent, 'one', '--concurrency-key', 'user:1'])).trim().split(' ')[0]!;
    const [second, d1] = await Promise.all([
      ok(['run', agent, 'two', '--concurrency-key', 'user:1', '--json']),
      ok(['run', agent, 'd1', '--concurrency-key', 'doc', '--debounce', '60']),
    ]);
    const d2 = await ok(['run', agent, 'd2', '--concurrency-key', 'doc', '--debounce', '60']);
    expect(d2).toContain(`${d1.split(' ')[0]} queued (debounced)`);
    const single = await baton(['run', agent, 'three', '--concurrency-key', 'user:1', '--singleton']);
    expect(single.code).not.toBe(0);
    expect(single.stderr).toContain(first);
    const bad = await baton(['run', agent, 'x', '--concurrency-key', 'no spaces']);
    expect([bad.code !== 0, bad.stderr]).toEqual([true, expect.stringContaining('key')]);

    await s.node.engine.claim(agent, { owner: 'w', max: 5 });
    const [keys, why] = await Promise.all([ok(['agents', 'keys', agent]), ok(['why', JSON.parse(second).execution_id])]);
    expect(keys).toMatch(/user:1\s+1\/1\s+1/);
    expect(why).toContain('key_busy');

    const run = await tool('run_task', { agent, message: 'via mcp', key: 'user:2' });
    expect(run.structuredContent).toMatchObject({ outcome: 'started' });
    const refused = await tool('run_task', { agent, message: 'again', key: 'user:2', singleton: true });
    expect(refused.structuredContent).toMatchObject({ outcome: 'already_running' });
    expect(refused.structuredContent.message).toContain(run.structuredContent.execution_id);
  });
});
