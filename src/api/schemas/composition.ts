/** HTTP contract for composition: subscriptions (chains) and groups. */
import { z } from 'zod';
import { SUBSCRIPTION_ON } from '../../domain/chains.ts';
import { MESSAGE_MAX_CHARS } from '../../domain/limits.ts';
import { TRIGGER_KINDS } from '../../domain/states.ts';
import { CONTRACT_DEFAULTS } from '../../domain/defaults.ts';
import { IDEMPOTENCY_KEY_PATTERN } from '../../domain/batch.ts';
import { CONFIG_PAGE, PREVIEW_CHARS } from '../../domain/lists.ts';
import { GROUP_ITEM_ERRORS, GROUP_LIMITS, GROUP_PAGE, GROUP_POLICIES, GROUP_STATUSES } from '../../domain/groups.ts';
import { AgentName, ExecutionStatus, NextCursor, pageQuery } from '../schemas.ts';
import { Text } from './text.ts';

const Id = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be an id (letters, digits, - and _)');
const Timestamp = z.string().describe('ISO-8601 UTC timestamp');

// subscriptions

const SubscriptionFilter = z
  .strictObject({
    schedule_id: Id.nullable().optional().describe("only the source's executions from this schedule (retries included)"),
    trigger: z
      .enum(TRIGGER_KINDS)
      .nullable()
      .optional()
      .describe('only source executions started this way (a retry counts as its first run)'),
  })
  .describe('narrows which outcomes start a task; a filter given on PATCH replaces the whole filter');

const subscriptionFields = {
  on: z
    .enum(SUBSCRIPTION_ON)
    .describe('the final status that starts a task: succeeded, failed (after its retries), cancelled, or any of them'),
  filter: SubscriptionFilter.nullable().optional(),
  message: Text.min(1)
    .max(MESSAGE_MAX_CHARS)
    .describe(
      'template of the task message: {{source.id}}, {{source.status}}, {{source.result#/json/pointer}}, {{source.error.message}}, …',
    ),
  payload: z
    .unknown()
    .optional()
    .describe(
      'JSON template of the task payload (a string that is one placeholder keeps its type); omitted or null: a summary of the source',
    ),
  enabled: z.boolean().optional().describe('default true'),
};

export const SubscriptionCreate = z.strictObject({
  source_agent: AgentName.describe('whose executions are watched'),
  target_agent: AgentName.describe('where the task starts'),
  ...subscriptionFields,
});
export type SubscriptionCreate = z.infer<typeof SubscriptionCreate>;

export const SubscriptionPatch = z.strictObject({
  on: subscriptionFields.on.optional(),
  filter: subscriptionFields.filter,
  message: subscriptionFields.message.optional(),
  payload: subscriptionFields.payload,
  enabled: subscriptionFields.enabled,
});
export type SubscriptionPatch = z.infer<typeof SubscriptionPatch>;

export const Subscription = z.object({
  id: z.string(),
  source_agent: z.string(),
  target_agent: z.string(),
  on: z.enum(SUBSCRIPTION_ON),
  filter: z.object({ schedule_id: z.string().optional(), trigger: z.string().optional() }),
  message: z.string(),
  payload: z.unknown().describe('the JSON template, or null'),
  enabled: z.boolean(),
  created_at: Timestamp,
  created_by: z.string(),
  updated_at: Timestamp,
});
export type Subscription = z.infer<typeof Subscription>;

export const SubscriptionParams = z.strictObject({ id: Id });
export const SubscriptionQuery = z.strictObject({
  agent: AgentName.optional().describe('subscriptions where this agent is the source or the target'),
  source: AgentName.optional(),
  target: AgentName.optional(),
  ...pageQuery(CONFIG_PAGE),
});
export type SubscriptionQuery = z.infer<typeof SubscriptionQuery>;
/** A subscription in a list: `message` and `payload_preview` are previews; GET /v1/subscriptions/{id} has them whole. */
export const SubscriptionListItem = Subscription.omit({ payload: true }).extend({
  message: z.string().describe(`the template's first ${PREVIEW_CHARS} characters, ending in … when cut`),
  payload_preview: z.string().nullable().describe(`the payload template's JSON text, its first ${PREVIEW_CHARS} characters`),
});
export type SubscriptionListItem = z.infer<typeof SubscriptionListItem>;
export const SubscriptionList = z.object({
  subscriptions: z.array(SubscriptionListItem).describe('oldest first'),
  next_cursor: NextCursor,
});
export const SubscriptionDeleted = z.object({ deleted: z.string() });

// groups

const GroupMemberSpec = z.strictObject({
  agent: AgentName,
  message: Text.min(1).max(MESSAGE_MAX_CHARS).describe('the task, as text'),
  payload: z
    .unknown()
    .optional()
    .describe(`any JSON (at most ${CONTRACT_DEFAULTS.payloadLimitBytes / 1024} KiB serialised, as a submit)`),
  priority: z.number().int().min(-1000).max(1000).optional().describe('lower runs first (default 0)'),
  idempotency_key: z
    .string()
    .regex(IDEMPOTENCY_KEY_PATTERN, 'must be 1-255 visible ASCII characters')
    .optional()
    .describe(
      "taken on the member's agent like a submit's Idempotency-Key (and stored on the member): a key already used there refuses the item (duplicate_idempotency_key)",
    ),
});

const GroupJoinSpec = z.strictObject({
  agent: AgentName.describe('where the join task runs once the group decides'),
  message: Text.min(1)
    .max(MESSAGE_MAX_CHARS)
    .describe(
      'template of the join message: {{group.id}}, {{group.status}}, {{group.succeeded}}, {{members.0.result#/json/pointer}}, {{members.1.error.message}}, …',
    ),
  priority: z.number().int().min(-1000).max(1000).optional(),
});

export const GroupCreate = z.strictObject({
  members: z
    .array(GroupMemberSpec)
    .min(1)
    .max(GROUP_LIMITS.maxSize)
    .describe(`1 to ${GROUP_LIMITS.maxSize} tasks, created together or not at all`),
  policy: z
    .enum(GROUP_POLICIES)
    .optional()
    .describe(
      'all (default): wait for every member; all_succeeded: decide at the first failure; first_succeeded: decide at the first success; quorum: decide at `quorum` successes',
    ),
  quorum: z
    .number()
    .int()
    .min(1)
    .max(GROUP_LIMITS.maxSize)
    .optional()
    .describe('successes that decide a quorum group (only with policy quorum)'),
  join: GroupJoinSpec.nullable()
    .optional()
    .describe("the task started once, when the group decides, with every member's outcome in its payload"),
});
export type GroupCreate = z.infer<typeof GroupCreate>;

const GroupProgress = z.object({
  finished: z.number().int().describe('members in their final state (after their retries)'),
  succeeded: z.number().int(),
  failed: z.number().int(),
});
const groupFields = {
  id: z.string(),
  policy: z.enum(GROUP_POLICIES),
  quorum: z.number().int().nullable(),
  status: z.enum(GROUP_STATUSES),
  size: z.number().int(),
  progress: GroupProgress,
  join_refused: z
    .string()
    .nullable()
    .describe('why the join spec started no task (backlog_full, agent_missing, message_too_large, cancelled)'),
  created_at: Timestamp,
  created_by: z.string(),
  decided_at: Timestamp.nullable(),
};
export const GroupMemberView = z.object({
  index: z.number().int(),
  agent: z.string(),
  execution_id: z.string().describe('the latest run of its retry chain'),
  status: ExecutionStatus,
  attempt: z.number().int(),
  retry_number: z.number().int(),
  result_preview: z.string().nullable(),
  error: z.object({ code: z.string().nullable(), message: z.string().nullable() }).nullable(),
});
const GroupJoinView = z
  .object({
    agent: z.string(),
    execution_id: z.string().nullable().describe('null: not started yet (the group has not decided) or refused (join_refused)'),
    status: ExecutionStatus.nullable(),
  })
  .nullable()
  .describe('null: the group has no join spec');
export const Group = z.object({
  ...groupFields,
  members: z.array(GroupMemberView),
  join: GroupJoinView,
});
export type Group = z.infer<typeof Group>;
export const GroupCreated = Group.extend({
  paused_agents: z.array(z.string()).describe('member agents paused now: their members wait until resumed'),
});
export type GroupCreated = z.infer<typeof GroupCreated>;
export const GroupListItem = z.object({
  ...groupFields,
  join: GroupJoinView,
});
export const GroupPage = z.object({ groups: z.array(GroupListItem), next_cursor: z.string().nullable() });
export const GroupParams = z.strictObject({ id: Id });
export const GroupListQuery = z.strictObject(pageQuery(GROUP_PAGE));
export const GroupCancelled = z.object({ changed: z.boolean().describe('false: it had already decided or been cancelled'), group: Group });
export const GroupRefusedItem = z.object({
  index: z.union([z.number().int(), z.literal('join')]),
  error: z.enum(GROUP_ITEM_ERRORS),
  message: z.string(),
});
