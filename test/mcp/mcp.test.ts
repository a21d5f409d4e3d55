/**
 * The MCP server through the official SDK's client, over both transports: stdio (a real
 * `baton mcp` child process acting through the HTTP API) and Streamable HTTP at /mcp.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { BATON_BIN } from '../helpers/process.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';
import { countTurns } from '../helpers/turns.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const TOOLS = [
  'canary_status',
  'cancel_execution',
  'close_agent_breaker',
  'get_budget',
  'get_execution',
  'get_group',
  'get_logs',
  'get_pool',
  'list_agents',
  'list_executions',
  'list_pools',
  'list_subscriptions',
  'pause_agent',
  'resume_agent',
  'run_group',
  'run_task',
  'subscribe',
  'trigger_schedule',
  'unsubscribe',
];

let ts: TestStore;
let node: BatonNode;
let admin: string;
const clients: Client[] = [];

beforeAll(async () => {
  ts = await openTestStore({ poolMax: 3 });
  node = await startNode({
    env: ts.nodeEnv,
    logger: false,
    reaper: false,
    nodeId: 'mcp-test',
  });
  admin = node.createdAdminKey!;
});
afterAll(async () => {
  for (const c of clients) await c.close().catch(() => {});
  await node?.stop();
  await ts?.cleanup();
});

async function httpClient(key: string): Promise<Client> {
  const client = new Client({ name: 'baton-test', version: '0.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(node.url + '/mcp'), { requestInit: { headers: { authorization: `Bearer ${key}` } } }),
  );
  clients.push(client);
  return client;
}

async function stdioClient(key: string): Promise<Client> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k, v]) => !k.startsWith('BATON_') && v !== undefined)) as Record<
    string,
    string
  >;
  const client = new Client({ name: 'baton-test', version: '0.0.0' });
  await client.connect(
    new StdioClientTransport({
      command: process.execPath,
      args: [BATON_BIN, 'mcp'],
      cwd: ROOT,
      env: { ...base, BATON_URL: node.url, BATON_API_KEY: key },
      stderr: 'pipe',
    }),
  );
  clients.push(client);
  return client;
}

type Result = { structuredContent?: any; isError?: boolean; content: Array<{ type: string; text?: string }> };
const call = async (c: Client, name: string, args: Record<string, unknown> = {}) => (await c.callTool({ name, arguments: args })) as Result;
const text = (r: Result) => r.content.map((x) => x.text ?? '').join('\n');

describe.each([
  ['streamable http', httpClient],
  ['stdio (baton mcp)', stdioClient],
] as const)('MCP over %s', (_name, open) => {
  let c: Client;
  let agent: string;
  beforeAll(async () => {
    c = await open(admin);
    agent = `mcp-${Math.random().toString(36).slice(2, 8)}`;
    await node.engine.agents.create({ name: agent, max_parallel: 1, max_backlog: 2 }, 'test');
  });

  it('lists every tool with an input and an output schema', async () => {
    const { tools } = await c.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(TOOLS);
    for (const t of tools) {
      expect(t.inputSchema.type, t.name).toBe('object');
      expect(t.outputSchema?.type, t.name).toBe('object');
    }
  });

  it('list_agents shows seats and queue depth', async () => {
    const r = await call(c, 'list_agents');
    expect(r.isError).toBeFalsy();
    const a = r.structuredContent.agents.find((x: any) => x.name === agent);
    expect(a).toMatchObject({ running: 0, max_parallel: 1, queued: 0, max_backlog: 2 });
  });

  it('list_pools and get_pool read pools and their usage', async () => {
    const pool = `mcp-pool-${agent}`;
    await node.engine.pools.create({ name: pool, max_parallel: 4 }, 'test');
    await node.engine.agents.create({ name: `${pool}-agent`, pools: [pool] }, 'test');
    const list = await call(c, 'list_pools');
    expect(list.isError).toBeFalsy();
    expect(list.structuredContent.pools.map((p: any) => p.name)).toContain(pool);
    const one = await call(c, 'get_pool', { pool });
    expect(one.structuredContent).toMatchObject({ name: pool, max_parallel: 4, agents: [`${pool}-agent`], in_use: 0 });
    const missing = await call(c, 'get_pool', { pool: 'no-such-pool' });
    expect(missing.isError).toBe(true);
  });

  it('run_task returns the real execution id; get_execution, list_executions and cancel_execution see it', async () => {
    const r = await call(c, 'run_task', { agent, message: 'hello', payload: { n: 1 } });
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent).toMatchObject({ outcome: 'started', status: 'queued', finished: false });
    const id = r.structuredContent.execution_id as string;
    const row = await node.engine.getExecution(id);
    expect(row.execution.trigger_kind).toBe('mcp');

    const got = await call(c, 'get_execution', { execution_id: id });
    expect(got.structuredContent.execution).toMatchObject({ id, agent, status: 'queued', message: 'hello' });
    expect(got.structuredContent.timeline.map((e: any) => e.to)).toEqual(['queued']);

    const list = await call(c, 'list_executions', { agent, status: ['queued'] });
    expect(list.structuredContent.executions.map((e: any) => e.id)).toContain(id);
    // List items carry previews (get_execution has the whole payload and result).
    expect(list.structuredContent.executions.find((e: any) => e.id === id)).toMatchObject({
      message: 'hello',
      payload_preview: '{"n":1}',
      result_preview: null,
    });

    const cancelled = await call(c, 'cancel_execution', { execution_id: id });
    expect(cancelled.structuredContent).toMatchObject({ execution_id: id, status: 'cancelled', cancelled: true });
  });

  it('run_task with wait_seconds returns the outcome when it finishes in time', async () => {
    const worker = (async () => {
      const [row] = await node.engine.claim(agent, { owner: 'test-worker', waitMs: 20_000 });
      await node.engine.complete(
        row!.id,
        row!.lease_token!,
        { status: 'succeeded', result: { answer: 42 }, usage: { total_tokens: 7 } },
        'test',
      );
    })();
    const r = await call(c, 'run_task', { agent, message: 'compute', wait_seconds: 20 });
    await worker;
    expect(r.structuredContent).toMatchObject({ outcome: 'started', status: 'succeeded', finished: true });
    expect(r.structuredContent.execution).toMatchObject({ result: { answer: 42 }, usage: { total_tokens: 7 } });
  });

  it('a full backlog is a structured answer, not an error', async () => {
    const full = `${agent}-full`;
    await node.engine.agents.create({ name: full, max_backlog: 0 }, 'test');
    const r = await call(c, 'run_task', { agent: full, message: 'x' });
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent).toEqual({ outcome: 'backlog_full', message: expect.stringContaining('no run was started') });
  });

  it('unknown ids and agents are errors in words, and no id is made up', async () => {
    for (const [tool, args] of [
      ['get_execution', { execution_id: 'ex_doesnotexist' }],
      ['cancel_execution', { execution_id: 'ex_doesnotexist' }],
      ['run_task', { agent: 'no-such-agent', message: 'x' }],
    ] as const) {
      const r = await call(c, tool, args);
      expect(r.isError, tool).toBe(true);
      expect(text(r), tool).toMatch(/not_found/);
      expect(r.structuredContent, tool).toBeUndefined();
    }
    // Bad input is refused by the input schema before anything runs.
    const bad = await call(c, 'run_task', { agent: 'Not A Name', message: 'x' });
    expect(bad.isError).toBe(true);
  });

  it('trigger_schedule: an unknown schedule is an error in words, with no id', async () => {
    const r = await call(c, 'trigger_schedule', { schedule_id: 'sch_doesnotexist' });
    expect(r.isError).toBe(true);
    expect(text(r)).toMatch(/not_found/);
    expect(r.structuredContent).toBeUndefined();
  });

  it('trigger_schedule: started, then already_running naming the run in flight (a result, not an error)', async () => {
    const res = await fetch(`${node.url}/v1/agents/${agent}/schedules`, {
      method: 'POST',
      headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: `s-${Math.random().toString(36).slice(2, 8)}`, cron: '0 3 * * *', message: 'nightly' }),
    });
    expect(res.status).toBe(201);
    const schedule = (await res.json()) as { id: string };
    const first = await call(c, 'trigger_schedule', { schedule_id: schedule.id });
    expect(first.isError).toBeFalsy();
    expect(first.structuredContent).toMatchObject({ outcome: 'started', status: 'queued' });
    const running = first.structuredContent.execution_id as string;
    expect((await node.engine.getExecution(running)).execution.schedule_id).toBe(schedule.id);

    const again = await call(c, 'trigger_schedule', { schedule_id: schedule.id });
    expect(again.isError).toBeFalsy();
    expect(again.structuredContent).toMatchObject({ outcome: 'already_running', running_execution_id: running });
    expect(again.structuredContent.execution_id).toBeUndefined();
    expect(again.structuredContent.hint).toContain(running);
    expect(text(again)).toContain('no new run was started');
    await node.engine.cancel(running, 'test');
  });

  it('get_logs returns the lines a worker wrote; canary_status the canary state', async () => {
    const created = await node.engine.submit(agent, { message: 'logs' }, 'test');
    const [row] = await node.engine.claim(agent, { owner: 'log-writer' });
    expect(row!.id).toBe(created.id);
    const w = await fetch(`${node.url}/v1/executions/${row!.id}/logs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ lease_token: row!.lease_token, lines: [{ line: 'first line' }, { stream: 'stderr', line: 'second line' }] }),
    });
    expect(w.status).toBe(200);
    const logs = await call(c, 'get_logs', { execution_id: created.id });
    expect(logs.isError).toBeFalsy();
    expect(logs.structuredContent).toMatchObject({ available: true, execution_id: created.id, status: 'running' });
    expect(logs.structuredContent.lines.map((l: any) => [l.stream, l.line])).toEqual([
      ['stdout', 'first line'],
      ['stderr', 'second line'],
    ]);
    const rest = await call(c, 'get_logs', { execution_id: created.id, after: logs.structuredContent.next_after });
    expect(rest.structuredContent.lines).toEqual([]);
    const missing = await call(c, 'get_logs', { execution_id: 'ex_doesnotexist' });
    expect(missing.isError).toBe(true);
    expect(text(missing)).toMatch(/not_found/);
    const canary = await call(c, 'canary_status');
    expect(canary.isError).toBeFalsy();
    expect(canary.structuredContent.available).toBe(true);
    expect(['healthy', 'violated', 'stale', 'disabled']).toContain(canary.structuredContent.status.status);
    // A running execution is asked to stop: not final yet, and the answer says so.
    const stop = await call(c, 'cancel_execution', { execution_id: created.id });
    expect(stop.structuredContent).toMatchObject({ execution_id: created.id, status: 'running', cancelled: false });
    const hb = await node.engine.heartbeat(created.id, row!.lease_token!);
    expect(hb.cancel_requested).toBe(true);
    await node.engine.complete(created.id, row!.lease_token!, { status: 'cancelled' }, 'test');
  });

  it('subscribe, list_subscriptions, unsubscribe; get_execution lists what a source started', async () => {
    const target = `${agent}-next`;
    await node.engine.agents.create({ name: target, max_parallel: 1, max_backlog: 5 }, 'test');
    const bad = await call(c, 'subscribe', { source_agent: agent, target_agent: target, on: 'succeeded', message: '{{source.nope}}' });
    expect(bad.isError).toBe(true);
    expect(text(bad)).toMatch(/validation_error: body\.message: placeholder \{\{source\.nope\}\}/);
    const missing = await call(c, 'subscribe', { source_agent: agent, target_agent: 'no-such-agent', on: 'any', message: 'm' });
    expect(missing.isError).toBe(true);
    expect(text(missing)).toMatch(/not_found: agent 'no-such-agent'/);
    const r = await call(c, 'subscribe', { source_agent: agent, target_agent: target, on: 'succeeded', message: 'after {{source.id}}' });
    expect(r.isError).toBeFalsy();
    const sub = r.structuredContent.subscription;
    expect(sub).toMatchObject({ source_agent: agent, target_agent: target, on: 'succeeded', enabled: true });
    const list = await call(c, 'list_subscriptions', { agent: target });
    expect(list.structuredContent.subscriptions.map((s: any) => s.id)).toEqual([sub.id]);
    const src = await node.engine.submit(agent, { message: 'source' }, 'test');
    const [row] = await node.engine.claim(agent, { owner: 'mcp-test' });
    expect(row!.id).toBe(src.id);
    await node.engine.complete(src.id, row!.lease_token!, { status: 'succeeded' }, 'test');
    const got = await call(c, 'get_execution', { execution_id: src.id });
    expect(got.structuredContent.started).toEqual([
      { subscription_id: sub.id, execution_id: expect.any(String), refused: null, at: expect.any(String) },
    ]);
    const chained = await node.engine.getExecution(got.structuredContent.started[0].execution_id);
    expect(chained.execution).toMatchObject({ agent: target, caused_by: src.id, message: `after ${src.id}` });
    const gone = await call(c, 'unsubscribe', { subscription_id: sub.id });
    expect(gone.structuredContent).toMatchObject({ deleted: sub.id });
    expect((await call(c, 'unsubscribe', { subscription_id: sub.id })).isError).toBe(true);
    await node.engine.agents.delete(target, 'test');
  });

  it('an agent-scoped key sees only its scope', async () => {
    const { key } = await node.keys.create({ name: 'scoped', scope: 'agent', agent }, 'test');
    const scoped = await open(key);
    const r = await call(scoped, 'list_agents');
    expect(r.structuredContent.agents.map((a: any) => a.name)).toEqual([agent]);
    const denied = await call(scoped, 'list_executions', {});
    expect(denied.isError).toBe(true);
    expect(text(denied)).toMatch(/forbidden/);
  });
});

describe('MCP over HTTP: authentication', () => {
  it('refuses a missing or wrong key with 401 before any MCP framing', async () => {
    const init = {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '0' } },
    };
    for (const auth of [undefined, 'Bearer bt_0000000000000000_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx']) {
      const r = await fetch(node.url + '/mcp', {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          ...(auth ? { authorization: auth } : {}),
        },
        body: JSON.stringify(init),
      });
      expect(r.status).toBe(401);
      expect(((await r.json()) as { error: string }).error).toBe('unauthorized');
    }
  });
});

describe('MCP over HTTP: waiting', () => {
  it('run_task with wait_seconds polls the status, and reads the execution whole once', async () => {
    const agent = `mcp-wait-${Math.random().toString(36).slice(2, 8)}`;
    await node.engine.agents.create({ name: agent }, 'test');
    let full = 0;
    const getExecution = node.engine.getExecution.bind(node.engine);
    node.engine.getExecution = ((id: string) => (full++, getExecution(id))) as typeof getExecution;
    try {
      const r = await call(await httpClient(admin), 'run_task', { agent, message: 'nobody runs this', wait_seconds: 1.2 });
      expect(r.structuredContent).toMatchObject({ outcome: 'started', status: 'queued', finished: false });
      expect(r.structuredContent.execution).toMatchObject({ id: r.structuredContent.execution_id, status: 'queued' });
      const light = await fetch(`${node.url}/v1/executions/${r.structuredContent.execution_id}/status`, {
        headers: { authorization: `Bearer ${admin}` },
      });
      expect(await light.json()).toEqual({ id: r.structuredContent.execution_id, status: 'queued' });
    } finally {
      node.engine.getExecution = getExecution;
    }
    expect(full).toBe(1);
    const status = await fetch(`${node.url}/v1/executions/ex_doesnotexist/status`, { headers: { authorization: `Bearer ${admin}` } });
    expect(status.status).toBe(404);
    await node.engine.agents.delete(agent, 'test');
  });
});

describe('MCP over HTTP: pacing and bounds', () => {
  const post = async (body: unknown) => {
    const r = await fetch(node.url + '/mcp', {
      method: 'POST',
      headers: {
        authorization: `Bearer ${admin}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2025-06-18',
      },
      body: JSON.stringify(body),
    });
    expect(r.status).toBe(200);
    return (await r.json()) as any;
  };
  const toolCall = (id: number, name: string, args: Record<string, unknown>) => ({
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name, arguments: args },
  });
  it("a batch's calls are handled a turn of the event loop apart, not back to back", async () => {
    const counter = countTurns();
    const seen: number[] = [];
    const listAgents = node.engine.agents.list.bind(node.engine.agents);
    node.engine.agents.list = ((...args: Parameters<typeof listAgents>) => (
      seen.push(counter.turns),
      listAgents(...args)
    )) as typeof listAgents;
    try {
      const answers = await post([1, 2, 3, 4].map((id) => toolCall(id, 'list_agents', {})));
      expect(answers.map((a: any) => a.id).sort()).toEqual([1, 2, 3, 4]);
      for (const a of answers) expect(a.result.isError).toBeFalsy();
    } finally {
      counter.stop();
      node.engine.agents.list = listAgents;
    }
    expect(seen).toHaveLength(4);
    for (let i = 1; i < seen.length; i++) expect(seen[i]!).toBeGreaterThan(seen[i - 1]!);
  });

  it('answers past the bound of a batch are the documented error; a large answer alone is compact JSON', async () => {
    const agent = `mcp-big-${Math.random().toString(36).slice(2, 8)}`;
    await node.engine.agents.create({ name: agent }, 'test');
    const created = await node.engine.submit(agent, { message: 'big' }, 'test');
    const [row] = await node.engine.claim(agent, { owner: 'big-writer' });
    // One value of 1.5 MB: the answer carries it twice (as text and structured), about 3 MB.
    await node.engine.complete(row!.id, row!.lease_token!, { status: 'succeeded', result: { text: 'x'.repeat(1_500_000) } }, 'test');

    const answers = await post([1, 2].map((id) => toolCall(id, 'get_execution', { execution_id: created.id })));
    const refused = answers.filter((a: any) => a.error);
    expect(refused).toEqual([
      {
        jsonrpc: '2.0',
        id: expect.any(Number),
        error: { code: -32010, message: expect.stringMatching(/^answer too large: .* bounded at 4\.0 MiB/) },
      },
    ]);
    const answered = answers.find((a: any) => a.result)!;
    expect(answered.result.structuredContent.execution.result.text).toHaveLength(1_500_000);

    // On its own, the same call is answered (one call's answer is bounded by the API's limits), as compact JSON.
    const alone = await call(await httpClient(admin), 'get_execution', { execution_id: created.id });
    expect(alone.structuredContent.execution.result.text).toHaveLength(1_500_000);
    expect(text(alone)).toBe(JSON.stringify(alone.structuredContent));
    // Small answers stay indented for a reader.
    expect(text(await call(await httpClient(admin), 'list_agents'))).toContain('\n  ');
    await node.engine.agents.delete(agent, 'test');
  });

  it('a call that took effect is never refused past the bound: its answer is cut to its short fields', async () => {
    const tag = Math.random().toString(36).slice(2, 8);
    const big = `mcp-big-${tag}`;
    const worker = `mcp-cut-${tag}`;
    await node.engine.agents.create({ name: big }, 'test');
    await node.engine.agents.create({ name: worker }, 'test');
    const created = await node.engine.submit(big, { message: 'big' }, 'test');
    const [row] = await node.engine.claim(big, { owner: 'big-writer' });
    await node.engine.complete(row!.id, row!.lease_token!, { status: 'succeeded', result: { text: 'x'.repeat(1_500_000) } }, 'test');

    // A batch: the large read answers first (~3 MB); run_task waits for a run that ends with a
    // large result too, so its whole answer would take the batch past 4 MiB.
    const answering = post([
      toolCall(1, 'get_execution', { execution_id: created.id }),
      toolCall(2, 'run_task', { agent: worker, message: 'only once', wait_seconds: 30 }),
    ]);
    let task: Awaited<ReturnType<typeof node.engine.claim>>[number] | undefined;
    for (let i = 0; i < 300 && !task; i++) {
      [task] = await node.engine.claim(worker, { owner: 'cut-worker' });
      if (!task) await new Promise((r) => setTimeout(r, 50));
    }
    expect(task).toBeDefined();
    await node.engine.complete(task!.id, task!.lease_token!, { status: 'succeeded', result: { text: 'y'.repeat(1_500_000) } }, 'test');
    const answers = await answering;

    expect(answers.find((a: any) => a.id === 1).result.structuredContent.execution.result.text).toHaveLength(1_500_000);
    const cutAnswer = answers.find((a: any) => a.id === 2);
    expect(cutAnswer.error).toBeUndefined();
    const sc = cutAnswer.result.structuredContent;
    expect(sc).toMatchObject({ outcome: 'started', execution_id: task!.id, status: 'succeeded', finished: true });
    expect(sc.execution).toBeUndefined();
    expect(sc.message).toMatch(/run_task took effect, .*left out: execution; .*Do not send this call again/);
    expect(JSON.parse(cutAnswer.result.content[0].text)).toEqual(sc);
    // Still what the tool's outputSchema promises (what an SDK client checks).
    const { tools } = await (await httpClient(admin)).listTools();
    const schema = tools.find((t) => t.name === 'run_task')!.outputSchema!;
    expect(new AjvJsonSchemaValidator().getValidator(schema as never)(sc)).toMatchObject({ valid: true });
    // One run, as the answer says: nothing to send again.
    const runs = await node.engine.listExecutions({ agent: worker });
    expect(runs.map((r) => r.id)).toEqual([task!.id]);
    await node.engine.agents.delete(big, 'test');
    await node.engine.agents.delete(worker, 'test');
  });
});
