/**
 * The HTTP contract, defined once. Request and response types for the API, CLI, MCP and web UI
 * are inferred from these schemas; /openapi.json is generated from them.
 */
import { z } from 'zod';
import { Text, TEXT_CHARS, TEXT_CHARS_MESSAGE } from './schemas/text.ts';
import { queryInt } from './schemas/query.ts';
import { CONTRACT_DEFAULTS as DEFAULTS } from '../domain/defaults.ts';
import { RetryPolicy } from '../domain/retry.ts';
import { DELIVERY_MODES } from '../domain/delivery.ts';
import { COMPLETION_STATES, EXECUTION_STATES, TRIGGER_KINDS } from '../domain/states.ts';
import { CONFIG_PAGE, EXECUTION_PAGE, PREVIEW_CHARS, USAGE_LIST_CHARS } from '../domain/lists.ts';
import { AgentHold, AgentPaused, LapseHold, Paused, Waiting } from './schemas/admission.ts';
import { Budget, BudgetSetting } from './schemas/budget.ts';
import { PoolsSetting, Throttle, ThrottleSetting } from './schemas/pools.ts';
import { Breaker, BreakerSetting } from './schemas/breaker.ts';
import { AgentKeySettings, agentKeySettings, submitKeyFields } from './schemas/flow-keys.ts';
import { CHAIN_REFUSALS } from '../domain/chains.ts';
import { USAGE_MAX } from '../domain/budget.ts';

export const AGENT_NAME_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;
export const AgentName = z
  .string()
  .regex(AGENT_NAME_PATTERN, 'must be 1-63 characters: lowercase letters, digits and dashes, starting with a letter or digit');
const Id = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be an id (letters, digits, - and _)');
const Timestamp = z.string().describe('ISO-8601 UTC timestamp');
const NullableTimestamp = Timestamp.nullable();
export { Text, TEXT_CHARS, TEXT_CHARS_MESSAGE };

/**
 * The body of a request that takes none (cancel, retry, resume, DELETE …): nothing (Fastify's
 * `null`), or `{}`. A field sent is a 400 naming it, as on every other route, rather than dropped
 * unread.
 */
export const NoBody = z.strictObject({}).nullish().describe('none: this request takes no fields');

/** The query of a /v1 route that takes no parameters (contract.ts gives it to every such route). */
export const NoQuery = z.strictObject({});

export const ErrorBody = z
  .object({
    error: z.string().describe('machine-readable code'),
    message: z.string().describe('what went wrong, naming the field'),
  })
  .loose();

// ── agents ──────────────────────────────────────────────────────────────────

const agentSettings = {
  description: Text.max(1000).nullable().optional(),
  max_parallel: z.number().int().min(0).max(10_000).optional().describe(`capacity seats (default ${DEFAULTS.maxParallel})`),
  max_backlog: z.number().int().min(0).max(1_000_000).optional().describe(`queued executions allowed (default ${DEFAULTS.maxBacklog})`),
  timeout_seconds: z
    .number()
    .int()
    .min(1)
    .max(7 * 86_400)
    .optional()
    .describe(`hard timeout per run (default ${DEFAULTS.timeoutSeconds})`),
  lease_ttl_seconds: z.number().int().min(1).max(3600).optional().describe(`lease TTL (default ${DEFAULTS.leaseTtlSeconds})`),
  max_redeliveries: z
    .number()
    .int()
    .min(0)
    .max(100)
    .optional()
    .describe(`re-deliveries after a lapsed lease before 'poisoned' (default ${DEFAULTS.maxRedeliveries})`),
  delivery: z.enum(DELIVERY_MODES).optional().describe('pull: workers claim tasks (default); push: Baton POSTs tasks'),
  push_url: z
    .url({ protocol: /^https?$/, message: 'an http:// or https:// URL' })
    .regex(TEXT_CHARS, TEXT_CHARS_MESSAGE)
    .nullable()
    .optional()
    .describe("where Baton POSTs tasks (http or https), required when delivery is 'push'"),
  push_secret: Text.min(16)
    .max(1000)
    .nullable()
    .optional()
    .describe('HMAC-SHA256 signing secret for push deliveries (X-Baton-Signature): stored encrypted, never returned'),
  retry_policy: RetryPolicy.nullable().optional().describe('default retry policy of its executions (null: no retries)'),
  budget: BudgetSetting,
  breaker: BreakerSetting,
  ...agentKeySettings,
  pools: PoolsSetting,
  throttle: ThrottleSetting,
};
export const AgentCreate = z
  .strictObject({ name: AgentName, ...agentSettings })
  .refine((a) => a.delivery !== 'push' || !!a.push_url, { path: ['push_url'], message: "required when delivery is 'push'" });
export const AgentPatch = z.strictObject(agentSettings);
export type AgentCreate = z.infer<typeof AgentCreate>;
export type AgentPatch = z.infer<typeof AgentPatch>;

export const Agent = z.object({
  name: z.string(),
  description: z.string().nullable(),
  max_parallel: z.number().int(),
  max_backlog: z.number().int(),
  timeout_seconds: z.number().int(),
  lease_ttl_seconds: z.number().int(),
  max_redeliveries: z.number().int(),
  delivery: z.enum(DELIVERY_MODES),
  push_url: z.string().nullable(),
  push_signed: z.boolean().describe('a push signing secret is set (the secret itself is never returned)'),
  retry_policy: z.unknown().describe('RetryPolicy or null'),
  running: z.number().int().describe('running executions now (seats in use)'),
  queued: z.number().int(),
  paused: Paused,
  budget: Budget.nullable().describe('per-window spending limits (null: none); GET /v1/agents/{agent}/budget shows the spending'),
  lapse_hold: LapseHold,
  breaker: Breaker,
  hold: AgentHold,
  pools: z.array(z.string()).describe('the pools it draws from, in name order (GET /v1/pools/{pool} shows their usage)'),
  throttle: Throttle.nullable().describe('starts per period (null: none)'),
  last_claim_at: NullableTimestamp.describe('when a worker last claimed for it, to within a few seconds (null: never)'),
  keys: AgentKeySettings.describe('per-key limits: docs/concepts.md, "Concurrency keys"'),
  created_at: Timestamp,
  updated_at: Timestamp,
});
export type Agent = z.infer<typeof Agent>;
export const AgentParams = z.strictObject({ agent: AgentName });

// ── executions ──────────────────────────────────────────────────────────────

export const ExecutionStatus = z.enum(EXECUTION_STATES);
/** docs/operations.md, "OpenTelemetry": the same value whether or not this server exports traces. */
const TRACEPARENT = z
  .string()
  .describe(
    "W3C trace context of the execution's trace (`00-<trace id>-<span id>-01`), derived from its id: a worker's spans join the trace as its children",
  );

export const Execution = z.object({
  id: z.string(),
  agent: z.string(),
  status: ExecutionStatus,
  attempt: z.number().int().describe('deliveries charged so far'),
  trigger: z.enum(TRIGGER_KINDS),
  origin: z.unknown(),
  message: z.string(),
  payload: z.unknown(),
  priority: z.number().int(),
  schedule_id: z.string().nullable(),
  scheduled_for: NullableTimestamp,
  run_after: NullableTimestamp,
  created_at: Timestamp,
  queued_at: NullableTimestamp,
  started_at: NullableTimestamp,
  completed_at: NullableTimestamp,
  duration_ms: z.number().nullable(),
  lease_owner: z.string().nullable(),
  lease_expires_at: NullableTimestamp,
  heartbeat_at: NullableTimestamp,
  deadline_at: NullableTimestamp,
  cancel_requested_at: NullableTimestamp,
  result: z.unknown(),
  error: z.object({ code: z.string().nullable(), message: z.string().nullable() }).nullable(),
  usage: z.unknown(),
  retry_of: z.string().nullable(),
  retry_number: z.number().int().describe('0 for a first run, n for the n-th retry'),
  caused_by: z.string().nullable().describe('A chained task: the execution whose outcome started it'),
  subscription_id: z.string().nullable().describe('A chained task: the subscription that started it'),
  chain_depth: z.number().int().describe('0 unless a subscription started it: then its source’s depth + 1'),
  group_id: z.string().nullable().describe('The group it belongs to, as a member or as its join'),
  group_index: z.number().int().nullable().describe('A member’s position in its group (null on the join and outside groups)'),
  idempotency_key: z.string().nullable(),
  key: z.string().nullable().describe('its concurrency key (null: none); docs/concepts.md, "Concurrency keys"'),
  traceparent: TRACEPARENT,
});
export type Execution = z.infer<typeof Execution>;

export const ExecutionEvent = z.object({
  id: z.number().int(),
  from: ExecutionStatus.nullable(),
  to: ExecutionStatus,
  at: Timestamp,
  actor: z.string(),
  reason: z.string().nullable(),
  attempt: z.number().int(),
});
export const ExecutionDetail = Execution.extend({
  events: z.array(ExecutionEvent),
  retry_chain: z.array(z.string()).describe('every execution of its retry chain, first run first'),
  waiting: Waiting,
  started: z
    .array(
      z.object({
        subscription_id: z.string(),
        execution_id: z.string().nullable().describe('the chained task, or null when refused'),
        refused: z.enum(CHAIN_REFUSALS).nullable().describe('why the subscription started nothing'),
        at: Timestamp,
      }),
    )
    .describe('what its final outcome started through subscriptions on its agent (one entry per matching subscription)'),
});
export type ExecutionDetail = z.infer<typeof ExecutionDetail>;
/** Only the status: what a caller waiting for the end polls (the full read parses the payload and result). */
export const ExecutionStatusAnswer = z.object({ id: z.string(), status: ExecutionStatus });

/** The furthest ahead a task may be put off: a year. */
const MAX_DELAY_S = 365 * 86_400;

export const SubmitBody = z.strictObject({
  message: Text.min(1).max(100_000).describe('the task, as text (a worker command reads it on stdin)'),
  payload: z
    .unknown()
    .optional()
    .describe(`any JSON (at most ${DEFAULTS.payloadLimitBytes / 1024} KiB serialised)`),
  priority: z.number().int().min(-1000).max(1000).optional().describe('lower runs first (default 0)'),
  run_after: z.iso
    .datetime({ offset: true })
    .refine((v) => Date.parse(v) <= Date.now() + MAX_DELAY_S * 1000, { error: 'at most a year ahead (as delay_seconds)' })
    .optional()
    .describe('do not start before this time (at most a year ahead)'),
  delay_seconds: z.number().min(0).max(MAX_DELAY_S).optional().describe('do not start for this many seconds'),
  retry: RetryPolicy.nullable().optional().describe("overrides the agent's retry policy for this task"),
  ...submitKeyFields,
});
export type SubmitBody = z.infer<typeof SubmitBody>;

export const Created = z.object({
  execution_id: z.string(),
  status: ExecutionStatus,
  agent: z.string(),
  agent_paused: AgentPaused,
  debounced: z
    .boolean()
    .optional()
    .describe('true: the submit was folded into the key’s debounced task, whose id this is (it runs once, with this message and payload)'),
  execution: Execution,
});

export const ExecutionParams = z.strictObject({ id: Id });

const csvStatuses = z
  .string()
  .transform((s) =>
    s
      .split(',')
      .map((x) => x.trim())
      .filter(Boolean),
  )
  .pipe(z.array(ExecutionStatus));
/** `limit` and `cursor` of a paged list, within `bounds` (src/domain/lists.ts). */
export const pageQuery = (bounds: { default: number; max: number }, cursorChars = 200) => ({
  limit: queryInt(1, bounds.max).optional().describe(`page size (default ${bounds.default}, at most ${bounds.max})`),
  cursor: z.string().max(cursorChars).optional().describe('next_cursor of the previous page'),
});
/** The answer's cursor field of a paged list. */
export const NextCursor = z.string().nullable().describe('pass as `cursor` for the next page (null: this was the last)');

/** GET /v1/agents: a page of agents in name order (an agent-scoped key sees its own agent only). */
export const AgentListQuery = z.strictObject(pageQuery(CONFIG_PAGE));
export type AgentListQuery = z.infer<typeof AgentListQuery>;
export const AgentList = z.object({ agents: z.array(Agent).describe('in name order'), next_cursor: NextCursor });
export const ListExecutionsQuery = z.strictObject({
  agent: AgentName.optional(),
  status: csvStatuses.optional().describe('comma-separated statuses'),
  schedule_id: Id.optional(),
  since: z.iso.datetime({ offset: true }).optional().describe('created at or after'),
  until: z.iso.datetime({ offset: true }).optional().describe('created before'),
  ...pageQuery(EXECUTION_PAGE),
});
const Preview = z.string().describe(`the first ${PREVIEW_CHARS} characters, then '…' when cut`);
/** A list item: the execution without its bodies (GET /v1/executions/{id} has them in full). */
export const ExecutionListItem = Execution.omit({ payload: true, result: true, traceparent: true }).extend({
  message: Preview,
  payload_preview: Preview.nullable().describe(`the payload's JSON text: the first ${PREVIEW_CHARS} characters, then '…' when cut`),
  result_preview: Preview.nullable().describe(
    `the result's JSON text (null: none): the first ${PREVIEW_CHARS} characters, then '…' when cut`,
  ),
  error: z.object({ code: z.string().nullable(), message: Preview.nullable() }).nullable(),
  usage: z.unknown().describe(`null when its JSON is over ${USAGE_LIST_CHARS} characters (the single read has it)`),
});
export type ExecutionListItem = z.infer<typeof ExecutionListItem>;
export const ExecutionPage = z.object({ executions: z.array(ExecutionListItem), next_cursor: z.string().nullable() });

// ── worker protocol ─────────────────────────────────────────────────────────

export const ClaimBody = z.strictObject({
  worker_id: Text.min(1).max(200).optional().describe('names the lease owner (default: the key id)'),
  wait_seconds: z
    .number()
    .min(0)
    .max(DEFAULTS.claimWaitMaxMs / 1000)
    .optional()
    .describe(`long-poll wait (default ${DEFAULTS.claimWaitMs / 1000})`),
  max: z
    .number()
    .int()
    .min(1)
    .max(100)
    .optional()
    .describe(
      `most tasks to take at once (default 1); fewer once those taken carry ${DEFAULTS.claimAnswerBytes / 1024 / 1024} MiB of message and payload (always at least one)`,
    ),
});
export const Task = z.object({
  execution_id: z.string(),
  agent: z.string(),
  attempt: z.number().int(),
  message: z.string(),
  payload: z.unknown(),
  lease_token: z.string(),
  lease_expires_at: Timestamp,
  lease_ttl_seconds: z.number().int(),
  deadline_at: Timestamp,
  traceparent: TRACEPARENT,
});
export type Task = z.infer<typeof Task>;
export const ClaimResponse = z.object({ tasks: z.array(Task) });

export const LeaseBody = z.strictObject({ lease_token: Text.min(1).max(200) });
export const HeartbeatResponse = z.object({
  lease_expires_at: Timestamp,
  cancel_requested: z.boolean().describe('stop the task and complete it as cancelled'),
  deadline_at: NullableTimestamp,
});

const Tokens = z.number().int().min(0).max(USAGE_MAX.tokens);
export const Usage = z
  .object({
    input_tokens: Tokens.optional(),
    output_tokens: Tokens.optional(),
    total_tokens: Tokens.optional(),
    cost_usd: z.number().min(0).max(USAGE_MAX.cost_usd).optional(),
  })
  .loose();
export const CompleteBody = z.strictObject({
  lease_token: Text.min(1).max(200),
  status: z.enum(COMPLETION_STATES),
  result: z.unknown().optional(),
  error: z
    .strictObject({ code: Text.min(1).max(100).optional(), message: Text.max(10_000) })
    .optional()
    .describe('why it failed'),
  usage: Usage.optional(),
});
export type CompleteBody = z.infer<typeof CompleteBody>;

// ── keys ────────────────────────────────────────────────────────────────────

export const KeyCreate = z.strictObject({
  name: Text.min(1).max(200),
  scope: z.enum(['admin', 'agent']).describe('admin: everything; agent: the worker protocol for one agent'),
  agent: AgentName.optional(),
});
export const ApiKey = z.object({
  id: z.string(),
  name: z.string(),
  scope: z.enum(['admin', 'agent']),
  agent: z.string().nullable(),
  created_at: Timestamp,
  revoked_at: NullableTimestamp,
});
export const ApiKeyCreated = ApiKey.extend({ key: z.string().describe('the secret key: shown once, never again') });
export const KeyParams = z.strictObject({ id: Id });
