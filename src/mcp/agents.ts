/**
 * MCP tools for agents: list them with their seats and queues, pause and resume admission, read a
 * budget, close a circuit breaker by hand.
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import type { BatonClient } from '../client.ts';
import { AgentName } from '../api/schemas.ts';
import { Paused, PauseBody } from '../api/schemas/admission.ts';
import { BudgetAnswer } from '../api/schemas/budget.ts';
import { asFailure, ok } from './answers.ts';

const pausedShape = { agent: z.string(), paused: Paused, queued: z.number(), running: z.number(), message: z.string() };
const pausedResult = (a: { name: string; paused: z.infer<typeof Paused>; queued: number; running: number }, message: string) =>
  ok({ agent: a.name, paused: a.paused, queued: a.queued, running: a.running, message });

export function registerAgentTools(server: McpServer, client: BatonClient): void {
  registerListAgents(server, client);
  registerPauseAgent(server, client);
  registerResumeAgent(server, client);
  registerGetBudget(server, client);
  registerCloseAgentBreaker(server, client);
}

function registerListAgents(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'list_agents',
    {
      title: 'List agents',
      description: 'Agents this key can see, with seats in use (running / max_parallel) and queue depth (queued / max_backlog).',
      inputSchema: {},
      outputSchema: {
        agents: z.array(
          z.object({
            name: z.string(),
            description: z.string().nullable(),
            delivery: z.string(),
            running: z.number(),
            max_parallel: z.number(),
            queued: z.number(),
            max_backlog: z.number(),
            timeout_seconds: z.number(),
            paused: Paused,
          }),
        ),
      },
      annotations: { readOnlyHint: true },
    },
    async () => {
      try {
        const agents = (await client.listAgents()).map((a) => ({
          name: a.name,
          description: a.description,
          delivery: a.delivery,
          running: a.running,
          max_parallel: a.max_parallel,
          queued: a.queued,
          max_backlog: a.max_backlog,
          timeout_seconds: a.timeout_seconds,
          paused: a.paused,
        }));
        return ok({ agents });
      } catch (err) {
        return asFailure(err);
      }
    },
  );
}

function registerPauseAgent(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'pause_agent',
    {
      title: 'Pause an agent',
      description:
        'Stop admitting work for an agent until resumed: its queue keeps filling (up to its backlog) and running tasks finish. Idempotent: pausing a paused agent keeps the first reason.',
      inputSchema: { agent: AgentName.describe('agent name'), reason: PauseBody.shape.reason },
      outputSchema: pausedShape,
      annotations: { idempotentHint: true },
    },
    async ({ agent, reason }) => {
      try {
        const a = await client.pauseAgent(agent, reason);
        return pausedResult(a, `agent ${a.name} paused since ${a.paused!.since} by ${a.paused!.by}: ${a.paused!.reason}`);
      } catch (err) {
        return asFailure(err);
      }
    },
  );
}

function registerResumeAgent(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'resume_agent',
    {
      title: 'Resume an agent',
      description: 'Admit work for a paused agent again, at once. Idempotent.',
      inputSchema: { agent: AgentName.describe('agent name') },
      outputSchema: pausedShape,
      annotations: { idempotentHint: true },
    },
    async ({ agent }) => {
      try {
        const a = await client.resumeAgent(agent);
        return pausedResult(a, `agent ${a.name} resumed (${a.queued} queued)`);
      } catch (err) {
        return asFailure(err);
      }
    },
  );
}

function registerGetBudget(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'get_budget',
    {
      title: "Read an agent's budget",
      description:
        "An agent's spending limits: per limit, the current window's spending, what remains and when the window resets. `spent: true`: a limit is spent and the agent admits nothing until its window rolls or the limit is raised.",
      inputSchema: { agent: AgentName.describe('agent name') },
      outputSchema: BudgetAnswer.shape,
      annotations: { readOnlyHint: true },
    },
    async ({ agent }) => {
      try {
        return ok(await client.agentBudget(agent));
      } catch (err) {
        return asFailure(err);
      }
    },
  );
}

function registerCloseAgentBreaker(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'close_agent_breaker',
    {
      title: "Close an agent's circuit breaker",
      description:
        "Close an agent's circuit breaker by hand (after fixing what made its tasks fail): admission resumes at once and its failure counts start afresh. Idempotent.",
      inputSchema: { agent: AgentName.describe('agent name') },
      outputSchema: { agent: z.string(), breaker: z.string(), queued: z.number(), message: z.string() },
      annotations: { idempotentHint: true },
    },
    async ({ agent }) => {
      try {
        const a = await client.closeBreaker(agent);
        const state = a.breaker ? a.breaker.state : 'off';
        return ok({
          agent: a.name,
          breaker: state,
          queued: a.queued,
          message: `agent ${a.name} circuit breaker ${state} (${a.queued} queued)`,
        });
      } catch (err) {
        return asFailure(err);
      }
    },
  );
}
