/** The MCP tool for the canary: whether every invariant holds, and the open violations. */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import type { BatonClient } from '../client.ts';
import { asFailure, missingRoute, NotAvailable, ok } from './answers.ts';

export function registerCanaryTools(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'canary_status',
    {
      title: 'Canary status',
      description: "The built-in invariant checker's state: whether every invariant holds, and open violations.",
      inputSchema: {},
      outputSchema: { ...NotAvailable, status: z.object({}).loose().optional(), message: z.string().optional() },
      annotations: { readOnlyHint: true },
    },
    async () => {
      try {
        const status = await client.canaryStatus();
        return ok({ available: true, status });
      } catch (err) {
        if (missingRoute(err)) return ok({ available: false, message: 'the canary is not available on this server' });
        return asFailure(err);
      }
    },
  );
}
