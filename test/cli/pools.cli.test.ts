/**
 * Pools through the real `baton` command (a child process) against a server started in this
 * process: baton pools create|list|show|update|delete, agents --pool/--no-pool/--throttle, and
 * `baton why` naming the pool, its cap and its seat holders.
 */
import { describe, expect, it } from 'vitest';
import { cliNode } from '../helpers/cli-node.ts';
import { SPAWN_TIMEOUT_MS } from '../helpers/process.ts';
import { STORE_KIND } from '../helpers/store.ts';

const s = cliNode('pools-cli-test');
const { baton, ok } = s;

describe(`pools: CLI (${STORE_KIND})`, { timeout: 6 * SPAWN_TIMEOUT_MS }, () => {
  it('create, draw from, explain, refuse to delete while in use, delete', async () => {
    const budget = { limits: [{ metric: 'total_tokens', window: 'minute', limit: 400000 }] };
    await ok(['pools', 'create', 'provider', '--max-parallel', '1', '--throttle', '600/60+20', '--budget-json', JSON.stringify(budget)]);
    await ok(['agents', 'create', 'cli-pa', '--pool', 'provider', '--throttle', '10/60+2']);
    await ok(['agents', 'create', 'cli-pb', '--pool', 'provider']);
    const [list, shown, agentShown] = await Promise.all([
      ok(['pools', 'list']),
      ok(['pools', 'show', 'provider', '--json']),
      ok(['agents', 'show', 'cli-pa']),
    ]);
    expect(list).toContain('provider');
    expect(JSON.parse(shown)).toMatchObject({ name: 'provider', agents: ['cli-pa', 'cli-pb'], max_parallel: 1, in_use: 0 });
    expect(agentShown).toContain('provider');
    expect(agentShown).toContain('10 starts per 60 s (burst 2)');

    await s.node.engine.submit('cli-pa', { message: 'runs' }, 'test');
    const [held] = await s.node.engine.claim('cli-pa', { owner: 'w' });
    const waiting = await s.node.engine.submit('cli-pb', { message: 'waits' }, 'test');
    const why = await ok(['why', waiting.id]);
    expect(why).toContain('pool_full');
    expect(why).toContain('provider');
    expect(why).toContain(held!.id);

    const refused = await baton(['pools', 'delete', 'provider']);
    expect(refused.code).toBe(10);
    expect(refused.stderr).toContain('cli-pa');
    const badThrottle = await baton(['agents', 'update', 'cli-pa', '--throttle', '0/60']);
    expect(badThrottle.code).toBe(2);
    expect(badThrottle.stderr).toContain('throttle');
    await ok(['agents', 'update', 'cli-pa', '--no-pool', '--throttle', 'none']);
    await ok(['agents', 'update', 'cli-pb', '--no-pool']);
    expect(JSON.parse(await ok(['agents', 'show', 'cli-pa', '--json']))).toMatchObject({ pools: [], throttle: null });
    await ok(['pools', 'update', 'provider', '--max-parallel', 'none']);
    await ok(['pools', 'delete', 'provider']);
    expect((await baton(['pools', 'show', 'provider'])).code).not.toBe(0);
  });
});
