/**
 * MCP tools for groups (fan-out with a join): an orchestrating agent dispatches
 * sub-tasks to agents with `run_group` and waits, bounded, for the join's outcome (or the group's
 * decision when there is no join), or polls `get_group`. Refusals are structured answers.
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { ApiError, groupSettled, type BatonClient, type Group as GroupView } from '../client.ts';
import { ExecutionStatus } from '../api/schemas.ts';
import { IDEMPOTENCY_KEY_PATTERN } from '../domain/batch.ts';
import { Group, GroupCreate, GroupRefusedItem } from '../api/schemas/composition.ts';

/** How long run_group may hold a tool call open: as run_task (MCP clients time out near 60 s). */
export const GROUP_MAX_WAIT_SECONDS = 55;

const GroupId = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be a group id');
const JoinOutcome = z.object({
  execution_id: z.string(),
  status: ExecutionStatus,
  result: z.unknown(),
  error: z.object({ code: z.string().nullable(), message: z.string().nullable() }).nullable(),
});

const ok = (data: Record<string, unknown>, text: string) => ({ content: [{ type: 'text' as const, text }], structuredContent: data });
const failure = (err: unknown) => ({
  content: [
    { type: 'text' as const, text: err instanceof ApiError ? `${err.code}: ${err.message}` : ((err as Error)?.message ?? String(err)) },
  ],
  isError: true,
});

const progressText = (g: GroupView) =>
  `group ${g.id} is ${g.status}: ${g.progress.finished}/${g.size} members finished (${g.progress.succeeded} succeeded, ${g.progress.failed} failed)`;

/** The join's outcome once it is terminal (result and error in full), else undefined. */
async function joinOutcome(client: BatonClient, g: GroupView) {
  if (!g.join?.execution_id || !groupSettled(g)) return undefined;
  const e = await client.getExecution(g.join.execution_id);
  return { execution_id: e.id, status: e.status, result: e.result ?? null, error: e.error };
}

async function answer(client: BatonClient, g: GroupView, paused: string[], waited: number | undefined) {
  const settled = groupSettled(g);
  const join = await joinOutcome(client, g);
  const parts = [progressText(g)];
  if (join) parts.push(`join ${join.execution_id} ${join.status}`);
  else if (g.join_refused) parts.push(`no join was started: ${g.join_refused}`);
  if (paused.length > 0) parts.push(`paused agents (their members wait until resumed): ${paused.join(', ')}`);
  if (!settled) parts.push(waited ? `not settled after ${waited}s: poll get_group` : 'poll get_group for progress');
  return ok(
    {
      outcome: 'started',
      group_id: g.id,
      status: g.status,
      settled,
      group: g,
      ...(join ? { join } : {}),
      paused_agents: paused,
      message: parts.join('; '),
    },
    parts.join('; '),
  );
}

export function registerGroupTools(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'run_group',
    {
      title: 'Run a group of tasks and join them',
      description:
        'Dispatch sub-tasks to agents as one group, created together or not at all: each member runs under its own agent’s cap. When the policy decides (all: every member ended; all_succeeded: first failure; first_succeeded: first success; quorum: k successes), the rest are cancelled and the join task (optional) starts once, with every member’s result and error in its payload. With wait_seconds, waits for the join’s outcome (or the decision when there is no join); otherwise returns the group id to poll with get_group. A refusal (unknown agent, full backlog, reused idempotency key) is a structured answer listing every failing item; members on paused agents are queued and wait (paused_agents says which).',
      inputSchema: {
        ...GroupCreate.shape,
        wait_seconds: z
          .number()
          .min(0)
          .max(GROUP_MAX_WAIT_SECONDS)
          .optional()
          .describe(`wait up to this long for the join's outcome (default 0, at most ${GROUP_MAX_WAIT_SECONDS})`),
        idempotency_key: z
          .string()
          .regex(IDEMPOTENCY_KEY_PATTERN, 'must be 1-255 visible ASCII characters')
          .optional()
          .describe('the same key again returns the same group instead of a new one'),
      },
      outputSchema: {
        outcome: z.enum(['started', 'refused']),
        group_id: z.string().optional(),
        status: z.string().optional(),
        settled: z.boolean().optional().describe('true when the group decided and its join (if one started) ended'),
        group: Group.optional(),
        join: JoinOutcome.optional().describe("the join's outcome, once it ended"),
        paused_agents: z.array(z.string()).optional(),
        items: z.array(GroupRefusedItem).optional().describe('refused: every item that cannot be created now, and why'),
        message: z.string(),
      },
    },
    async ({ wait_seconds, idempotency_key, ...spec }) => {
      try {
        const created = await client.createGroup(spec, { idempotencyKey: idempotency_key });
        const { paused_agents, ...g } = created;
        if (!wait_seconds) return await answer(client, g, paused_agents, undefined);
        const done = await client.waitForGroup(created.id, { timeoutMs: wait_seconds * 1000, intervalMs: 250 });
        return await answer(client, done, paused_agents, wait_seconds);
      } catch (err) {
        if (err instanceof ApiError && err.code === 'group_refused') {
          const items = (err.body.items ?? []) as Array<z.infer<typeof GroupRefusedItem>>;
          const text = `no group was created: ${items.map((i) => `${i.index === 'join' ? 'join' : `member ${i.index}`}: ${i.error} (${i.message})`).join('; ')}`;
          return ok({ outcome: 'refused', items, message: text }, text);
        }
        return failure(err);
      }
    },
  );

  server.registerTool(
    'get_group',
    {
      title: 'Get a group',
      description: "A group's status, progress, members (status, result preview, error) and join; with the join's outcome once it ended.",
      inputSchema: { group_id: GroupId },
      outputSchema: { group: Group, settled: z.boolean(), join: JoinOutcome.optional(), message: z.string() },
      annotations: { readOnlyHint: true },
    },
    async ({ group_id }) => {
      try {
        const g = await client.getGroup(group_id);
        const join = await joinOutcome(client, g);
        const text = progressText(g) + (join ? `; join ${join.execution_id} ${join.status}` : '');
        return ok({ group: g, settled: groupSettled(g), ...(join ? { join } : {}), message: text }, text);
      } catch (err) {
        return failure(err);
      }
    },
  );
}
