/** An agent's activity over time: the dashboard's charts (GET /v1/agents/{agent}/series and /seats). */
import { z } from 'zod';
import { ACTIVITY_WINDOW_NAMES, SEAT_ROW_CAP, SERIES_BUCKETS, SERIES_ROW_CAP } from '../../domain/activity.ts';

const Timestamp = z.string().describe('ISO-8601 UTC timestamp');
const Ms = z.number().int().nullable();

export const ActivityQuery = z.strictObject({
  window: z.enum(ACTIVITY_WINDOW_NAMES).default('1h').describe('how far back from now (default 1h)'),
});

export const SeriesBucket = z.object({
  start: Timestamp.describe('bucket start; the bucket lasts bucket_ms'),
  succeeded: z.number().int().describe('runs that finished succeeded in the bucket'),
  failed: z.number().int(),
  other: z.number().int().describe('runs that finished cancelled or skipped'),
  p50_ms: Ms.describe('median duration of the runs that succeeded or failed in the bucket (null: none)'),
  p95_ms: Ms.describe('95th percentile duration (nearest rank)'),
  queued_max: z.number().int().describe('most runs waiting in the queue at once during the bucket'),
  running_max: z.number().int().describe('most seats in use at once during the bucket'),
});

export const AgentSeries = z.object({
  agent: z.string(),
  window: z.enum(ACTIVITY_WINDOW_NAMES),
  from: Timestamp,
  to: Timestamp,
  bucket_ms: z.number().int(),
  max_parallel: z.number().int().describe("the agent's seat cap now"),
  complete_from: Timestamp.nullable().describe(
    `null: every bucket is complete. Otherwise more than ${SERIES_ROW_CAP} runs finished in the window: the counts stay exact, but durations, queue depth and seats come from the newest ${SERIES_ROW_CAP} finished runs, which start here (earlier buckets lack them)`,
  ),
  buckets: z.array(SeriesBucket).describe(`${SERIES_BUCKETS} buckets, oldest first`),
});
export type AgentSeries = z.infer<typeof AgentSeries>;

export const SeatInterval = z.object({
  execution_id: z.string(),
  seat: z
    .number()
    .int()
    .describe('0-based seat, drawn: each run takes the lowest seat free when it started (runs are not stamped with a seat)'),
  status: z.string(),
  attempt: z.number().int(),
  owner: z.string().nullable().describe('the worker (or dispatcher) that held the lease'),
  queued_at: Timestamp.nullable().describe('when it last joined the queue: the wait before the seat'),
  started_at: Timestamp,
  ended_at: Timestamp.nullable().describe('null: still running'),
});

export const AgentSeats = z.object({
  agent: z.string(),
  window: z.enum(ACTIVITY_WINDOW_NAMES),
  from: Timestamp,
  to: Timestamp,
  max_parallel: z.number().int().describe("the agent's seat cap now"),
  seats_used: z.number().int().describe('most seats in use at once in the window'),
  truncated: z.boolean().describe(`true when more than ${SEAT_ROW_CAP} runs or waiting rows matched: the oldest are left out`),
  intervals: z.array(SeatInterval).describe('runs that held a seat in the window: running ones first, then newest finished first'),
  waiting: z
    .array(z.object({ execution_id: z.string(), queued_at: Timestamp.nullable(), run_after: Timestamp.nullable() }))
    .describe('runs queued now, in admission order'),
});
export type AgentSeats = z.infer<typeof AgentSeats>;
