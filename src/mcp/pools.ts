/** MCP tools for pools (read only): list them, read one with its usage. */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import type { BatonClient } from '../client.ts';
import { Pool, PoolName, PoolUsage } from '../api/schemas/pools.ts';
import { asFailure, ok } from './answers.ts';

export function registerPoolTools(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'list_pools',
    {
      title: 'List pools',
      description: 'Pools: seats, a throttle (starts per period) and a budget (usage per window) shared by the agents that draw from them.',
      inputSchema: {},
      outputSchema: { pools: z.array(Pool) },
      annotations: { readOnlyHint: true },
    },
    async () => {
      try {
        return ok({ pools: await client.listPools() });
      } catch (err) {
        return asFailure(err);
      }
    },
  );
  server.registerTool(
    'get_pool',
    {
      title: 'Read a pool and its usage',
      description:
        'A pool with the agents that draw from it, its seats in use, when its throttle next admits a start, and each budget limit with its current window.',
      inputSchema: { pool: PoolName.describe('pool name') },
      outputSchema: PoolUsage.shape,
      annotations: { readOnlyHint: true },
    },
    async ({ pool }) => {
      try {
        return ok(await client.getPool(pool));
      } catch (err) {
        return asFailure(err);
      }
    },
  );
}
