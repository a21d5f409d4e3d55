/** HTTP contract for schedules, manual triggers and webhooks (see docs/triggers.md). */
import { z } from 'zod';
import { PREVIEW_CHARS, CONFIG_PAGE } from '../../domain/lists.ts';
import { MISFIRE_POLICIES, OVERLAP_POLICIES } from '../../domain/policies.ts';
import { RetryPolicy } from '../../domain/retry.ts';
import { AgentName, Execution, ExecutionStatus, NextCursor, pageQuery } from '../schemas.ts';
import { Text } from './text.ts';
import { AgentPaused } from './admission.ts';

const Id = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be an id (letters, digits, - and _)');
const Timestamp = z.string().describe('ISO-8601 UTC timestamp');
const Overlap = z.enum(OVERLAP_POLICIES);
const Misfire = z.enum(MISFIRE_POLICIES);

const scheduleFields = {
  name: Text.min(1).max(200),
  cron: Text.min(1).max(200).describe('5 fields (minute hour day month weekday) or 6 (second first)'),
  timezone: Text.min(1).max(100).optional().describe('IANA time zone (default UTC)'),
  message: Text.min(1).max(100_000).describe('the task each run receives'),
  payload: z.unknown().optional().describe('JSON each run receives (default null)'),
  enabled: z.boolean().optional().describe('default true'),
  overlap_policy: Overlap.optional().describe('skip (default): no new run while one is in flight; queue | allow: start anyway'),
  misfire_policy: Misfire.optional().describe('run_once (default): one catch-up run within the grace; skip: missed ticks are skipped'),
  misfire_grace_seconds: z
    .number()
    .int()
    .min(0)
    .max(7 * 86_400)
    .optional()
    .describe('default 3600'),
  retry_policy: RetryPolicy.nullable().optional().describe("overrides the agent's retry policy"),
  priority: z.number().int().min(-1000).max(1000).optional().describe('lower runs first (default 0)'),
};
export const ScheduleCreate = z.strictObject(scheduleFields);
export const SchedulePatch = z.strictObject(
  Object.fromEntries(Object.entries(scheduleFields).map(([k, v]) => [k, v.optional()])) as {
    [K in keyof typeof scheduleFields]: z.ZodOptional<(typeof scheduleFields)[K]>;
  },
);
export type ScheduleCreate = z.infer<typeof ScheduleCreate>;
export type SchedulePatch = z.infer<typeof SchedulePatch>;

export const Schedule = z.object({
  id: z.string(),
  agent: z.string(),
  name: z.string(),
  cron: z.string(),
  timezone: z.string(),
  message: z.string(),
  payload: z.unknown(),
  enabled: z.boolean(),
  overlap_policy: Overlap,
  misfire_policy: Misfire,
  misfire_grace_seconds: z.number().int(),
  retry_policy: z.unknown(),
  priority: z.number().int(),
  next_run_at: Timestamp.nullable().describe('the next due time (null when disabled)'),
  last_run_at: Timestamp.nullable().describe('due time of the last run started'),
  next_runs: z.array(Timestamp).describe('the next few due times'),
  created_at: Timestamp,
  updated_at: Timestamp,
});
export type Schedule = z.infer<typeof Schedule>;
export const ScheduleParams = z.strictObject({ id: Id });
/**
 * A schedule in a list: `message` and `payload_preview` are previews, and of its due times only
 * the next (`next_run_at`, stored); GET /v1/schedules/{id} has them whole, with `next_runs`.
 */
export const ScheduleListItem = Schedule.omit({ payload: true, next_runs: true }).extend({
  message: z.string().describe(`the first ${PREVIEW_CHARS} characters, ending in … when cut`),
  payload_preview: z.string().nullable().describe(`the payload's JSON text, its first ${PREVIEW_CHARS} characters`),
});
export type ScheduleListItem = z.infer<typeof ScheduleListItem>;
export const ScheduleList = z.object({
  schedules: z.array(ScheduleListItem).describe('ordered by agent, then name'),
  next_cursor: NextCursor,
});
export const ScheduleListQuery = z.strictObject(pageQuery(CONFIG_PAGE, 1000));
export type ScheduleListQuery = z.infer<typeof ScheduleListQuery>;
export const ScheduleDeleted = z.object({ deleted: z.string(), cancelled: z.number().int(), cancel_requested: z.number().int() });

export const TriggerBody = z
  .strictObject({ payload: z.unknown().optional().describe("replaces the schedule's payload for this run") })
  .nullish();
export const Triggered = z.object({
  execution_id: z.string(),
  status: ExecutionStatus,
  schedule_id: z.string(),
  agent: z.string(),
  agent_paused: AgentPaused,
  execution: Execution,
});

export const WebhookCreate = z.strictObject({
  name: Text.min(1).max(200),
  agent: AgentName.optional().describe('target agent (give agent or schedule_id)'),
  schedule_id: Id.optional().describe('target schedule: its message, payload and overlap policy apply'),
  message: Text.min(1).max(100_000).optional().describe('for an agent target: the task text (default "webhook <name>")'),
  overlap_policy: Overlap.optional().describe('for an agent target: skip coalesces deliveries while a run is in flight (default allow)'),
  secret: Text.min(16).max(256).optional().describe('HMAC-SHA256 signing secret the sender uses'),
  generate_secret: z.boolean().optional().describe('generate a signing secret (shown once)'),
});
export type WebhookCreate = z.infer<typeof WebhookCreate>;
export const WebhookRotate = z.strictObject({ secret: Text.min(16).max(256).optional() }).nullish();

export const Webhook = z.object({
  id: z.string(),
  name: z.string(),
  agent: z.string(),
  schedule_id: z.string().nullable(),
  message: z.string(),
  overlap_policy: Overlap,
  enabled: z.boolean(),
  signed: z.boolean().describe('deliveries must carry an HMAC signature'),
  created_at: Timestamp,
  last_delivery_at: Timestamp.nullable(),
});
export const WebhookCreated = Webhook.extend({
  token: z.string().describe('the secret URL token: shown once, never again'),
  path: z.string().describe('POST here: /hooks/<token>'),
  secret: z.string().nullable().describe('the signing secret when generated: shown once'),
});
export const WebhookParams = z.strictObject({ id: Id });
/** A webhook in a list: `message` is a preview; GET /v1/webhooks/{id} has it whole. */
export const WebhookListItem = Webhook.extend({
  message: z.string().describe(`the first ${PREVIEW_CHARS} characters, ending in … when cut`),
});
export type WebhookListItem = z.infer<typeof WebhookListItem>;
export const WebhookList = z.object({
  webhooks: z.array(WebhookListItem).describe('ordered by agent, then name'),
  next_cursor: NextCursor,
});
export const WebhookListQuery = z.strictObject({ agent: AgentName.optional(), ...pageQuery(CONFIG_PAGE, 1000) });
export type WebhookListQuery = z.infer<typeof WebhookListQuery>;
export const HookAccepted = z.object({
  status: z.enum(['queued', 'running', 'already_running']),
  execution_id: z.string(),
  agent_paused: AgentPaused,
});
