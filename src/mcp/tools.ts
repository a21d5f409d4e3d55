/**
 * Baton's MCP tools. Every tool acts through the HTTP API with the caller's key (a BatonClient),
 * so an agent-scoped key sees exactly what it would see over HTTP. Results are structured
 * (`structuredContent` matching each tool's `outputSchema`); refusals that are answers — above
 * all `already_running` — come back as structured results, not errors.
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { ApiError, type BatonClient, type Execution, type ExecutionListItem } from '../client.ts';
import { EXECUTION_PAGE, PREVIEW_CHARS } from '../domain/lists.ts';
import { isTerminal } from '../domain/states.ts';
import { AgentName, ExecutionDetail as ExecutionDetailSchema, ExecutionStatus } from '../api/schemas.ts';
import { Paused, PauseBody, Waiting } from '../api/schemas/admission.ts';
import { BudgetAnswer } from '../api/schemas/budget.ts';
import { Subscription, SubscriptionCreate, SubscriptionListItem } from '../api/schemas/composition.ts';
import { VERSION } from '../version.ts';
import { registerGroupTools } from './groups.ts';
import { ownTurn } from './pacing.ts';

/** How long run_task / trigger_schedule may hold a tool call open; MCP clients time out near 60 s. */
export const MAX_WAIT_SECONDS = 55;
const ExecutionId = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be an execution id');

const ErrorShape = z.object({ code: z.string().nullable(), message: z.string().nullable() }).nullable();
const Summary = z.object({
  id: z.string(),
  agent: z.string(),
  status: ExecutionStatus,
  attempt: z.number(),
  trigger: z.string(),
  schedule_id: z.string().nullable(),
  message: z.string(),
  created_at: z.string(),
  started_at: z.string().nullable(),
  completed_at: z.string().nullable(),
  duration_ms: z.number().nullable(),
  error: ErrorShape,
  retry_of: z.string().nullable(),
});
const Outcome = Summary.extend({ result: z.unknown(), usage: z.unknown() });
/** A list_executions item: the summary with previews of the payload and result (get_execution has them in full). */
const ListItem = Summary.extend({
  payload_preview: z
    .string()
    .nullable()
    .describe(`the payload's JSON text, its first ${PREVIEW_CHARS} characters ('…' after them when cut)`),
  result_preview: z.string().nullable().describe(`the result's JSON text, its first ${PREVIEW_CHARS} characters ('…' after them when cut)`),
});
const NotAvailable = { available: z.boolean().describe('false: this server has no such route') };

const summary = (e: Execution | ExecutionListItem) => ({
  id: e.id,
  agent: e.agent,
  status: e.status,
  attempt: e.attempt,
  trigger: e.trigger,
  schedule_id: e.schedule_id,
  message: e.message.length > 500 ? e.message.slice(0, 500) + '…' : e.message,
  created_at: e.created_at,
  started_at: e.started_at,
  completed_at: e.completed_at,
  duration_ms: e.duration_ms,
  error: e.error,
  retry_of: e.retry_of,
});
const outcome = (e: Execution) => ({ ...summary(e), result: e.result ?? null, usage: e.usage ?? null });
const listItem = (e: ExecutionListItem) => ({ ...summary(e), payload_preview: e.payload_preview, result_preview: e.result_preview });

type Structured = Record<string, unknown>;
/**
 * Answers up to this size are indented for a reader; larger ones go compact: indenting a 1.8 MB
 * result of 120,000 keys made a 2.8 MB text, serialised again (escaped) into the JSON-RPC answer.
 */
const PRETTY_MAX_CHARS = 64 * 1024;
/**
 * A result: the structured answer and the same JSON as text. A turn of the event loop before
 * serialising it (the client parsed the API's answer in this one) and after, when it is large
 * (the SDK validates and serialises it next): each costs ~30–55 ms for a 1.8 MB result.
 */
async function ok(data: Structured, text?: string) {
  await ownTurn();
  let json = text;
  if (json === undefined) {
    json = JSON.stringify(data);
    if (json.length <= PRETTY_MAX_CHARS) json = JSON.stringify(data, null, 2);
    else await ownTurn();
  }
  return { content: [{ type: 'text' as const, text: json }], structuredContent: data };
}
const failure = (message: string) => ({ content: [{ type: 'text' as const, text: message }], isError: true });

/** A 404 from the router (not from a resource lookup): the route does not exist on this server. */
const missingRoute = (err: unknown) => err instanceof ApiError && err.status === 404 && err.message.startsWith('no route');

/** Domain refusals become error results in words; anything else (unreachable server) too. */
function asFailure(err: unknown) {
  if (err instanceof ApiError) return failure(`${err.code}: ${err.message}`);
  return failure((err as Error)?.message ?? String(err));
}

/** How often a waiting run_task / trigger_schedule reads the status (BatonClient.waitFor reads only that). */
const WAIT_POLL_MS = 250;
const waitUntilDone = (client: BatonClient, id: string, seconds: number) =>
  client.waitFor(id, { timeoutMs: seconds * 1000, intervalMs: WAIT_POLL_MS });

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
        wait_seconds: z
          .number()
          .min(0)
          .max(MAX_WAIT_SECONDS)
          .optional()
          .describe(`wait up to this long for the outcome (default 0, at most ${MAX_WAIT_SECONDS})`),
      },
      outputSchema: {
        outcome: z.enum(['started', 'backlog_full']),
        execution_id: z.string().optional(),
        status: ExecutionStatus.optional(),
        finished: z.boolean().optional().describe('true when the execution reached a final state within wait_seconds'),
        execution: Outcome.optional(),
        message: z.string(),
      },
    },
    async ({ agent, message, payload, priority, wait_seconds }) => {
      try {
        const created = await client.submit(agent, { message, payload, priority });
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
        return asFailure(err);
      }
    },
  );

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

  const pausedShape = { agent: z.string(), paused: Paused, queued: z.number(), running: z.number(), message: z.string() };
  const pausedResult = (a: { name: string; paused: z.infer<typeof Paused>; queued: number; running: number }, message: string) =>
    ok({ agent: a.name, paused: a.paused, queued: a.queued, running: a.running, message });
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

  // Chains: an agent's outcome starts a task on another (docs/mcp.md, "Subscriptions").
  const subscriptionText = (s: Omit<z.infer<typeof Subscription>, 'payload'>) =>
    `${s.id}: when ${s.source_agent} ends ${s.on}${s.filter.schedule_id ? ` (schedule ${s.filter.schedule_id})` : ''}${s.filter.trigger ? ` (trigger ${s.filter.trigger})` : ''}, start a task on ${s.target_agent}${s.enabled ? '' : ' [disabled]'}`;
  server.registerTool(
    'subscribe',
    {
      title: "Subscribe an agent to another's outcomes",
      description:
        'When an execution of source_agent reaches a final status that `on` names (succeeded, failed after its retries, cancelled, or any), start a task on target_agent in the same transaction, exactly once. The message and payload are templates over the source: {{source.id}}, {{source.status}}, {{source.result#/json/pointer}}, {{source.error.message}}, {{source.payload}}. Chains deeper than the server limit (default 10) start nothing and are recorded on the source.',
      inputSchema: SubscriptionCreate.shape,
      outputSchema: { subscription: Subscription, message: z.string() },
    },
    async (input) => {
      try {
        const s = await client.createSubscription(input);
        return ok({ subscription: s, message: `subscribed ${subscriptionText(s)}` });
      } catch (err) {
        return asFailure(err);
      }
    },
  );
  server.registerTool(
    'list_subscriptions',
    {
      title: 'List subscriptions',
      description:
        'Subscriptions (chains), oldest first: every one, or those where `agent` is the source or the target. Message templates are previews; payload templates are shown as `payload_preview`.',
      inputSchema: { agent: AgentName.optional().describe('only those where this agent is the source or the target') },
      outputSchema: { subscriptions: z.array(SubscriptionListItem) },
      annotations: { readOnlyHint: true },
    },
    async ({ agent }) => {
      try {
        const subscriptions = await client.listSubscriptions(agent);
        return ok({ subscriptions }, subscriptions.length ? subscriptions.map(subscriptionText).join('\n') : 'no subscriptions');
      } catch (err) {
        return asFailure(err);
      }
    },
  );
  server.registerTool(
    'unsubscribe',
    {
      title: 'Delete a subscription',
      description: 'Delete a subscription: later outcomes start nothing through it; tasks it already started stay.',
      inputSchema: { subscription_id: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be a subscription id') },
      outputSchema: { deleted: z.string(), message: z.string() },
      annotations: { destructiveHint: true, idempotentHint: false },
    },
    async ({ subscription_id }) => {
      try {
        const r = await client.deleteSubscription(subscription_id);
        return ok({ deleted: r.deleted, message: `subscription ${r.deleted} deleted` });
      } catch (err) {
        return asFailure(err);
      }
    },
  );

  // Groups: fan-out with a join (docs/mcp.md, "Groups").
  registerGroupTools(server, client);

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

  return server;
}
