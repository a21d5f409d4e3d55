import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, expect } from 'vitest';
import { startNode, type BatonNode } from '../../src/server/up.ts';
import { cliRunner, type CliRun } from './process.ts';
import { openTestStore, type TestStore } from './store.ts';

export type ToolResult = { structuredContent?: any; isError?: boolean; content: Array<{ type: string; text?: string }> };

export interface CliNode {
  /** Set in beforeAll: the test store, the server started in this process and its admin key. */
  ts: TestStore;
  node: BatonNode;
  admin: string;
  /** Run `baton ...args` (a child process); the server and key come from the environment unless `env` overrides them. */
  baton: (args: string[], env?: Record<string, string | undefined>) => Promise<CliRun>;
  /** As `baton`, expecting exit 0 (the failure message shows both streams); answers stdout. */
  ok: (args: string[]) => Promise<string>;
  /** Call an MCP tool over Streamable HTTP as the admin (only with `{ mcp: true }`). */
  tool: (name: string, args: Record<string, unknown>) => Promise<ToolResult>;
}

/**
 * The set-up the CLI tests share: one test store, a `baton up` node in this process (no logger, no
 * reaper), its admin key in the environment of every `baton` run, and with `mcp` an MCP client of
 * the same node. Registers its own beforeAll/afterAll; the fields are set once beforeAll has run.
 */
export function cliNode(nodeId: string, opts: { mcp?: boolean } = {}): CliNode {
  let mcp: Client | undefined;
  const cli = cliRunner(() => ({ BATON_URL: s.node.url, BATON_API_KEY: s.admin, BATON_DATA_DIR: s.ts.location.dataDir }));
  const s: CliNode = {
    ts: undefined as unknown as TestStore,
    node: undefined as unknown as BatonNode,
    admin: '',
    baton: cli.run,
    async ok(args) {
      const r = await cli.run(args);
      expect(r.code, `baton ${args.join(' ')}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`).toBe(0);
      return r.stdout;
    },
    async tool(name, args) {
      if (!mcp) throw new Error('cliNode: pass { mcp: true } to call MCP tools');
      return (await mcp.callTool({ name, arguments: args })) as ToolResult;
    },
  };
  beforeAll(async () => {
    s.ts = await openTestStore({ poolMax: 4 });
    s.node = await startNode({ env: s.ts.nodeEnv, logger: false, reaper: false, nodeId });
    s.admin = s.node.createdAdminKey!;
    if (opts.mcp) {
      mcp = new Client({ name: 'baton-test', version: '0.0.0' });
      const headers = { authorization: `Bearer ${s.admin}` };
      await mcp.connect(new StreamableHTTPClientTransport(new URL(s.node.url + '/mcp'), { requestInit: { headers } }));
    }
  });
  afterAll(async () => {
    cli.killAll();
    await mcp?.close().catch(() => {});
    await s.node?.stop();
    await s.ts?.cleanup();
  });
  return s;
}
