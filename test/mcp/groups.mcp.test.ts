/** MCP `run_group` and `get_group` through the official SDK's client over Streamable HTTP at /mcp. */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let node: BatonNode;
let c: Client;

beforeAll(async () => {
  ts = await openTestStore({ poolMax: 4 });
  node = await startNode({ env: ts.nodeEnv, logger: false, reaper: false, scheduler: false, nodeId: 'groups-mcp-test' });
  c = new Client({ name: 'baton-test', version: '0.0.0' });
  await c.connect(
    new StreamableHTTPClientTransport(new URL(node.url + '/mcp'), {
      requestInit: { headers: { authorization: `Bearer ${node.createdAdminKey}` } },
    }),
  );
  for (const name of ['mcp-sub', 'mcp-lead']) await node.engine.agents.create({ name, max_parallel: 10 }, 'test');
  await node.engine.agents.create({ name: 'mcp-full', max_backlog: 0 }, 'test');
});
afterAll(async () => {
  await c?.close().catch(() => {});
  await node?.stop();
  await ts?.cleanup();
});

type Result = { structuredContent?: any; isError?: boolean; content: Array<{ type: string; text?: string }> };
const call = async (name: string, args: Record<string, unknown> = {}) => (await c.callTool({ name, arguments: args })) as Result;

/** A worker standing in: claims what `agent` has (waiting up to 20 s for it) and ends it. */
async function serve(agent: string, n: number, outcome: (message: string) => { status: 'succeeded' | 'failed'; result?: unknown }) {
  for (let done = 0; done < n;) {
    for (const row of await node.engine.claim(agent, { owner: 'test', max: 10, waitMs: 20_000 })) {
      const o = outcome(row.message);
      await node.engine.complete(
        row.id,
        row.lease_token!,
        o.status === 'failed'
          ? { status: 'failed', error: { code: 'nope', message: `${row.message} failed` } }
          : { status: 'succeeded', result: o.result },
        'test',
      );
      done++;
    }
  }
}

describe(`MCP run_group and get_group (${STORE_KIND})`, () => {
  it('dispatches sub-tasks and waits for the join: structured results, in order', async () => {
    const workers = (async () => {
      await serve('mcp-sub', 3, (m) => (m === 'b' ? { status: 'failed' } : { status: 'succeeded', result: { said: m } }));
      await serve('mcp-lead', 1, (m) => ({ status: 'succeeded', result: { summary: m } }));
    })();
    const r = await call('run_group', {
      members: ['a', 'b', 'c'].map((message) => ({ agent: 'mcp-sub', message })),
      join: { agent: 'mcp-lead', message: '{{group.succeeded}}/{{group.size}}: {{members.0.result#/said}} {{members.1.error.message}}' },
      wait_seconds: 30,
    });
    await workers;
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent).toMatchObject({
      outcome: 'started',
      status: 'failed',
      settled: true,
      join: { status: 'succeeded', result: { summary: '2/3: a b failed' } },
      paused_agents: [],
    });
    expect(r.structuredContent.group.members.map((m: any) => [m.index, m.status])).toEqual([
      [0, 'succeeded'],
      [1, 'failed'],
      [2, 'succeeded'],
    ]);
    const got = await call('get_group', { group_id: r.structuredContent.group_id });
    expect(got.structuredContent).toMatchObject({
      settled: true,
      join: { status: 'succeeded' },
      group: { progress: { finished: 3, succeeded: 2, failed: 1 } },
    });
  });

  it('without wait_seconds returns the group id to poll; paused agents are named honestly', async () => {
    await node.engine.agents.pause('mcp-sub', 'maintenance', 'test');
    try {
      const r = await call('run_group', { members: [{ agent: 'mcp-sub', message: 'later' }], policy: 'first_succeeded' });
      expect(r.structuredContent).toMatchObject({ outcome: 'started', status: 'running', settled: false, paused_agents: ['mcp-sub'] });
      expect(r.structuredContent.message).toMatch(/paused agents .*mcp-sub/);
      const got = await call('get_group', { group_id: r.structuredContent.group_id });
      expect(got.structuredContent).toMatchObject({ settled: false, group: { status: 'running', policy: 'first_succeeded' } });
    } finally {
      await node.engine.agents.resume('mcp-sub', 'test');
    }
  });

  it('refusals are structured answers naming every failing item: unknown agent, full backlog', async () => {
    const r = await call('run_group', {
      members: [
        { agent: 'mcp-sub', message: 'fine' },
        { agent: 'mcp-nobody', message: 'x' },
        { agent: 'mcp-full', message: 'y' },
      ],
    });
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent).toMatchObject({
      outcome: 'refused',
      items: [
        { index: 1, error: 'agent_not_found' },
        { index: 2, error: 'backlog_full' },
      ],
    });
    expect(r.structuredContent.message).toMatch(/no group was created/);
    const missing = await call('get_group', { group_id: 'gr_missing' });
    expect(missing.isError).toBe(true);
  });
});
