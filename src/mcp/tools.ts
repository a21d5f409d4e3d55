/**
 * Baton's MCP tools. Every tool acts through the HTTP API with the caller's key (a BatonClient),
 * so an agent-scoped key sees exactly what it would see over HTTP. Results are structured
 * (`structuredContent` matching each tool's `outputSchema`); refusals that are answers — above
 * all `already_running` — come back as structured results, not errors. Each area's tools live in their own file (agents.ts,
 * executions.ts, schedules.ts, subscriptions.ts, groups.ts, canary.ts); this one composes them.
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { BatonClient } from '../client.ts';
import { VERSION } from '../version.ts';
import { registerAgentTools } from './agents.ts';
import { registerPoolTools } from './pools.ts';
import { registerCanaryTools } from './canary.ts';
import { registerExecutionTools } from './executions.ts';
import { registerGroupTools } from './groups.ts';
import { registerScheduleTools } from './schedules.ts';
import { registerSubscriptionTools } from './subscriptions.ts';

/** Each server's tools that change nothing (`readOnlyHint`), noted as they are registered. */
const readOnly = new WeakMap<McpServer, Set<string>>();
/**
 * The names of a server's read-only tools: what the batch bound may refuse outright (pacing.ts).
 * Any other tool's call may have taken effect by the time its answer is measured.
 */
export const readOnlyTools = (server: McpServer): ReadonlySet<string> => readOnly.get(server) ?? new Set();

export function createMcpServer(client: BatonClient): McpServer {
  const server = new McpServer({ name: 'baton', version: VERSION }, { capabilities: { tools: {} } });
  const names = new Set<string>();
  readOnly.set(server, names);
  const register = server.registerTool.bind(server);
  server.registerTool = ((name: string, config: { annotations?: { readOnlyHint?: boolean } }, cb: unknown) => {
    if (config.annotations?.readOnlyHint) names.add(name);
    return (register as (...a: unknown[]) => unknown)(name, config, cb);
  }) as typeof server.registerTool;
  registerAgentTools(server, client);
  registerPoolTools(server, client);
  registerExecutionTools(server, client);
  registerScheduleTools(server, client);
  registerSubscriptionTools(server, client);
  registerGroupTools(server, client);
  registerCanaryTools(server, client);
  return server;
}
