/** The canary's HTTP contract: status, violation history, on-demand runs. Ids and reason codes only. */
import { z } from 'zod';
import {
  ALERT_SINKS,
  CANARY_STATES,
  CHECK_STATUSES,
  SEVERITIES,
  TIERS,
  VIOLATION_STATE_FILTERS,
  VIOLATION_TRANSITIONS,
} from '../../domain/canary.ts';
import { AgentName } from '../schemas.ts';
import { queryInt } from './query.ts';

const Timestamp = z.string().describe('ISO-8601 UTC timestamp');
const InvariantId = z.string().regex(/^[A-Z]-\d{2}$/, 'must be an invariant id like E-01');

export const Violation = z.object({
  id: z.number().int(),
  invariant: z.string(),
  subject: z.string().describe('execution id, agent, schedule id, or "canary" (H-01)'),
  agent: z.string().nullable(),
  tier: z.enum(TIERS),
  severity: z.enum(SEVERITIES),
  reason: z.string().describe('reason code'),
  diagnosis: z.string().describe('one line naming the component at fault'),
  detail: z
    .record(z.string(), z.union([z.string(), z.number(), z.null()]))
    .nullable()
    .describe('ids and numbers only'),
  first_seen: Timestamp,
  last_seen: Timestamp,
  resolved_at: Timestamp.nullable(),
});
export type Violation = z.infer<typeof Violation>;

export const FailedAlert = z.object({
  id: z.number().int(),
  invariant: z.string(),
  transition: z.enum(VIOLATION_TRANSITIONS),
  sink: z.enum(ALERT_SINKS),
  attempts: z.number().int(),
  last_error: z.string().nullable(),
  created_at: Timestamp,
});

export const CanaryStatus = z.object({
  status: z.enum(CANARY_STATES).describe('stale: no cycle completed within three intervals'),
  enabled: z.boolean().describe('this process runs the canary timer'),
  interval_ms: z.number().int(),
  stale_after_ms: z.number().int(),
  last_started_at: Timestamp.nullable(),
  last_completed_at: Timestamp.nullable(),
  last_ok: z.boolean().nullable().describe('the last cycle read its snapshot'),
  cycles: z.number().int(),
  lease_owner: z.string().nullable().describe('the process running the timer'),
  open_count: z.number().int(),
  checkpoint: z
    .object({
      event_id: z.number().int().nullable().describe('the next cycle reads the events after this id (null: no cycle has run)'),
      latest_event_id: z.number().int().nullable().describe('the newest event'),
    })
    .describe('how far the cycles have read the event log (`baton canary run --full` reads all of it)'),
  open: z.array(Violation).describe('open violations, newest first (at most 200)'),
  alerts: z.object({ pending: z.number().int(), delivered: z.number().int(), failed: z.number().int() }),
  failed_alerts: z.array(FailedAlert).describe('alerts that could not be delivered'),
});
export type CanaryStatus = z.infer<typeof CanaryStatus>;

export const ViolationsQuery = z.strictObject({
  invariant: InvariantId.optional(),
  state: z.enum(VIOLATION_STATE_FILTERS).optional().describe('default open'),
  agent: AgentName.optional(),
  severity: z.enum(SEVERITIES).optional(),
  subject: z
    .string()
    .regex(/^[A-Za-z0-9_:.-]{1,128}$/, 'must be an id')
    .optional(),
  limit: queryInt(1, 500).optional().describe('page size (default 50)'),
  // An id is a BIGINT, read into a JS number: beyond 2^53 it cannot name a row exactly (nor, past 2^63, fit the column).
  before: queryInt(1, Number.MAX_SAFE_INTEGER).optional().describe('violations with a smaller id (next page)'),
});
export const ViolationPage = z.object({ violations: z.array(Violation), next_before: z.number().int().nullable() });

export const CheckSummary = z.object({
  id: z.string(),
  status: z.enum(CHECK_STATUSES),
  skipped_reason: z.string().optional(),
  notes: z.array(z.string()).optional(),
  truncated: z.boolean(),
  findings: z.array(z.object({ subject: z.string(), reason: z.string() })),
});
export const EventsRead = z.object({
  after: z.number().int().describe('the lowest checkpoint the cycle started from (0 in a full check)'),
  through: z.number().int().describe('the last event id read'),
  read: z.number().int().describe('events read'),
  caught_up: z.boolean().describe('false: the cycle stopped at its per-cycle cap; the next one continues'),
});
export const CycleReport = z.object({
  ok: z.boolean(),
  violated: z.boolean(),
  full: z.boolean().describe('a full check over all history, not the activity since the checkpoints'),
  events: EventsRead.optional().describe('the events the activity invariants read (absent when the snapshot failed)'),
  started_at: Timestamp,
  completed_at: Timestamp,
  duration_ms: z.number(),
  checks: z.array(CheckSummary),
  opened: z.number().int(),
  resolved: z.number().int(),
  open: z.number().int(),
  transitions: z.array(z.object({ invariant: z.string(), transition: z.enum(VIOLATION_TRANSITIONS) })),
});
export type CycleReport = z.infer<typeof CycleReport>;

const bool = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1');
export const CanaryRunQuery = z.strictObject({
  full: bool.optional().describe('judge all history in bounded chunks instead of the activity since the checkpoints (default false)'),
});
export const CanaryRunBody = z.strictObject({ full: z.boolean().optional().describe('as the `full` query parameter') }).nullish();
