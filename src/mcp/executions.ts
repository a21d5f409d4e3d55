/**
 * MCP tools for executions: run a task (waiting, bounded, for its outcome), read one with its
 * timeline, list them, cancel one, read its logs.
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { ApiError, type BatonClient } from '../client.ts';
import { EXECUTION_PAGE } from '../domain/lists.ts';
import { isTerminal } from '../domain/states.ts';
import { AgentName, ExecutionDetail as ExecutionDetailSchema, ExecutionStatus } from '../api/schemas.ts';
import { Waiting } from '../api/schemas/admission.ts';
import { submitKeyFields } from '../api/schemas/flow-keys.ts';
import {
  asFailure,
  ExecutionId,
  ListItem,
  listItem,
  MAX_WAIT_SECONDS,
  missingRoute,
  NotAvailable,
  ok,
  Outcome,
  outcome,
  waitUntilDone,
} from './answers.ts';

export function registerExecutionTools(server: McpServer, client: BatonClient): void {
  registerRunTask(server, client);
  registerGetExecution(server, client);
  registerListExecutions(server, client);
  registerCancelExecution(server, client);
  registerGetLogs(server, client);
}

function registerRunTask(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'run_task',
    {
      title: 'Run a task on an agent',
      description:
        'Submit a task to an agent. Returns the new execution id at once (status queued), or, with wait_seconds, the outcome if it finishes in time (finished: false otherwise: poll get_execution). A full backlog is a structured refusal (outcome backlog_full), not an error.',
      inputSchema: {
        agent: AgentName.describe('agent name'),
        message: z.string().min(1).max(100_000).describe('the task, as text'),
        payload: z.unknown().optional().describe('any JSON the agent should receive'),
        priority: z.number().int().min(-1000).max(1000).optional().describe('lower runs first (default 0)'),
        ...submitKeyFields,
        wait_seconds: z
          .number()
          .min(0)
          .max(MAX_WAIT_SECONDS)
          .optional()
          .describe(`wait up to this long for the outcome (default 0, at most ${MAX_WAIT_SECONDS})`),
      },
      outputSchema: {
        outcome: z.enum(['started', 'backlog_full', 'already_running']),
        execution_id: z.string().optional(),
        status: ExecutionStatus.optional(),
        finished: z.boolean().optional().describe('true when the execution reached a final state within wait_seconds'),
        execution: Outcome.optional(),
        message: z.string(),
      },
    },
    async ({ agent, message, payload, priority, key, debounce_seconds, singleton, wait_seconds }) => {
      try {
        const created = await client.submit(agent, { message, payload, priority, key, debounce_seconds, singleton });
        const id = created.execution_id;
        if (!wait_seconds)
          return ok({
            outcome: 'started',
            execution_id: id,
            status: created.status,
            finished: false,
            message: `execution ${id} is ${created.status}; poll get_execution for the outcome`,
          });
        const e = await waitUntilDone(client, id, wait_seconds);
        const finished = isTerminal(e.status);
        return ok({
          outcome: 'started',
          execution_id: id,
          status: e.status,
          finished,
          execution: outcome(e),
          message: finished
            ? `execution ${id} ${e.status}`
            : `execution ${id} is still ${e.status} after ${wait_seconds}s; poll get_execution`,
        });
      } catch (err) {
        if (err instanceof ApiError && err.code === 'backlog_full')
          return ok({ outcome: 'backlog_full', message: `no run was started: ${err.message}` });
        if (err instanceof ApiError && err.code === 'already_running')
          return ok({ outcome: 'already_running', message: `no run was started (singleton key): ${err.message}` });
        return asFailure(err);
      }
    },
  );
}

function registerGetExecution(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'get_execution',
    {
      title: 'Read an execution',
      description:
        'Status, result, error, usage and the event timeline of one execution; for a queued one, `waiting` says why it is not running yet (reason, facts, summary); `started`: the tasks its final outcome started through subscriptions (or why a subscription started none).',
      inputSchema: { execution_id: ExecutionId },
      outputSchema: {
        execution: Outcome,
        timeline: z.array(
          z.object({
            at: z.string(),
            from: z.string().nullable(),
            to: z.string(),
            reason: z.string().nullable(),
            actor: z.string(),
            attempt: z.number(),
          }),
        ),
        waiting: Waiting,
        started: ExecutionDetailSchema.shape.started,
      },
      annotations: { readOnlyHint: true },
    },
    async ({ execution_id }) => {
      try {
        const e = await client.getExecution(execution_id);
        return ok({
          execution: outcome(e),
          waiting: e.waiting,
          started: e.started ?? [], // what it started through subscriptions (older servers: none)
          timeline: e.events.map((ev) => ({
            at: ev.at,
            from: ev.from,
            to: ev.to,
            reason: ev.reason,
            actor: ev.actor,
            attempt: ev.attempt,
          })),
        });
      } catch (err) {
        return asFailure(err);
      }
    },
  );
}

function registerListExecutions(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'list_executions',
    {
      title: 'List executions',
      description:
        'Executions, newest first, optionally filtered by agent, status and schedule. Items carry previews of the message, payload and result; get_execution returns them in full.',
      inputSchema: {
        agent: AgentName.optional(),
        status: z.array(ExecutionStatus).optional().describe('any of these statuses'),
        schedule_id: z
          .string()
          .regex(/^[A-Za-z0-9_-]{1,64}$/)
          .optional(),
        limit: z.number().int().min(1).max(EXECUTION_PAGE.max).optional().describe('default 20'),
        cursor: z.string().max(200).optional().describe('next_cursor from the previous call'),
      },
      outputSchema: { executions: z.array(ListItem), next_cursor: z.string().nullable() },
      annotations: { readOnlyHint: true },
    },
    async ({ agent, status, schedule_id, limit, cursor }) => {
      try {
        const page = await client.listExecutions({ agent, status: status?.join(','), schedule_id, limit: limit ?? 20, cursor });
        return ok({ executions: page.executions.map(listItem), next_cursor: page.next_cursor });
      } catch (err) {
        return asFailure(err);
      }
    },
  );
}

function registerCancelExecution(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'cancel_execution',
    {
      title: 'Cancel an execution',
      description:
        'A queued execution is cancelled at once; a running one is asked to stop (its worker is told on its next heartbeat; forced after a grace period).',
      inputSchema: { execution_id: ExecutionId },
      outputSchema: {
        execution_id: z.string(),
        status: ExecutionStatus,
        cancelled: z.boolean().describe('true: final now; false: cancellation requested, still running'),
        message: z.string(),
      },
      annotations: { destructiveHint: true },
    },
    async ({ execution_id }) => {
      try {
        const e = await client.cancel(execution_id);
        const cancelled = e.status === 'cancelled';
        return ok({
          execution_id: e.id,
          status: e.status,
          cancelled,
          message: cancelled ? `${e.id} cancelled` : `${e.id}: cancellation requested (still ${e.status})`,
        });
      } catch (err) {
        return asFailure(err);
      }
    },
  );
}

function registerGetLogs(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'get_logs',
    {
      title: 'Read execution logs',
      description: 'Log lines a worker recorded for an execution, oldest first. Pass next_after back as after to read on.',
      inputSchema: {
        execution_id: ExecutionId,
        after: z.number().int().min(0).optional().describe('only lines after this seq (default 0)'),
        limit: z.number().int().min(1).max(1000).optional().describe('most lines (default 200)'),
      },
      outputSchema: {
        ...NotAvailable,
        execution_id: z.string(),
        status: z.string().optional().describe('the execution status when the lines were read'),
        lines: z.array(z.object({ seq: z.number(), at: z.string(), stream: z.string(), line: z.string() })),
        next_after: z.number().optional(),
        truncated: z.boolean().optional().describe('the log reached its size bounds; later lines were dropped'),
        message: z.string().optional(),
      },
      annotations: { readOnlyHint: true },
    },
    async ({ execution_id, after, limit }) => {
      try {
        const page = await client.getLogs(execution_id, { after, limit: limit ?? 200 });
        return ok({
          available: true,
          execution_id,
          status: page.status,
          lines: page.lines,
          next_after: page.next_after,
          truncated: page.truncated,
        });
      } catch (err) {
        if (missingRoute(err)) return ok({ available: false, execution_id, lines: [], message: 'logs are not available on this server' });
        return asFailure(err);
      }
    },
  );
}
