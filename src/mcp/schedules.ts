/**
 * MCP tools for schedules: run one now, with `already_running` as an answer (the run in flight)
 * rather than an error.
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { ApiError, type BatonClient } from '../client.ts';
import { isTerminal } from '../domain/states.ts';
import { ExecutionStatus } from '../api/schemas.ts';
import { asFailure, MAX_WAIT_SECONDS, missingRoute, ok, Outcome, outcome, waitUntilDone } from './answers.ts';

export function registerScheduleTools(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'trigger_schedule',
    {
      title: 'Trigger a schedule now',
      description:
        'Run a schedule now. outcome started: a new execution (its id). outcome already_running: no new run was started because the schedule does not allow overlap; running_execution_id names the run in flight: poll it with get_execution. outcome backlog_full: nothing started.',
      inputSchema: {
        schedule_id: z
          .string()
          .regex(/^[A-Za-z0-9_-]{1,64}$/)
          .describe('schedule id'),
        wait_seconds: z.number().min(0).max(MAX_WAIT_SECONDS).optional().describe('wait up to this long for the outcome of a started run'),
      },
      outputSchema: {
        outcome: z.enum(['started', 'already_running', 'backlog_full', 'not_available']),
        execution_id: z.string().optional().describe('the execution this call started'),
        running_execution_id: z.string().optional().describe('already_running: the execution in flight'),
        status: ExecutionStatus.optional(),
        finished: z.boolean().optional(),
        execution: Outcome.optional(),
        hint: z.string().optional(),
        message: z.string(),
      },
    },
    async ({ schedule_id, wait_seconds }) => {
      try {
        const r = await client.triggerSchedule(schedule_id);
        const id = r.execution_id;
        if (!wait_seconds)
          return ok({
            outcome: 'started',
            execution_id: id,
            status: r.status,
            finished: false,
            message: `schedule ${schedule_id} started execution ${id}`,
          });
        const e = await waitUntilDone(client, id, wait_seconds);
        const finished = isTerminal(e.status);
        return ok({
          outcome: 'started',
          execution_id: id,
          status: e.status,
          finished,
          execution: outcome(e),
          message: finished ? `execution ${id} ${e.status}` : `execution ${id} is still ${e.status}`,
        });
      } catch (err) {
        if (err instanceof ApiError && err.code === 'already_running') {
          const running = typeof err.body.execution_id === 'string' ? err.body.execution_id : undefined;
          return ok({
            outcome: 'already_running',
            ...(running ? { running_execution_id: running, hint: `poll get_execution with execution_id ${running} for its outcome` } : {}),
            message: `already running — no new run was started${running ? ` (running: ${running})` : ''}`,
          });
        }
        if (err instanceof ApiError && err.code === 'backlog_full')
          return ok({ outcome: 'backlog_full', message: `no run was started: ${err.message}` });
        if (missingRoute(err)) return ok({ outcome: 'not_available', message: 'schedules are not available on this server' });
        return asFailure(err);
      }
    },
  );
}
