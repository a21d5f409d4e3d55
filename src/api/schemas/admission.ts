/** Pause and resume, and `waiting`: why a queued execution is not running (src/domain/admission.ts). */
import { z } from 'zod';
import { ADMISSION_HOLDS, AHEAD_COUNT_CAP, NO_WORKER_AFTER_MS, WAITING_REASONS } from '../../domain/admission.ts';
import { BreakerWaiting } from './breaker.ts';
import { FlowPoolWaiting, FlowThrottleWaiting } from './pools.ts';
import { TEXT_CHARS, TEXT_CHARS_MESSAGE } from './text.ts';

const Timestamp = z.string().describe('ISO-8601 UTC timestamp');

export const Paused = z
  .object({
    by: z.string().describe("who paused it (the API key's principal)"),
    reason: z.string(),
    since: Timestamp,
  })
  .nullable()
  .describe('null: the agent admits; otherwise it admits nothing until resumed');

export const LapseHold = z
  .object({
    since: Timestamp.describe('when the reaper set the hold'),
    lapsed: z.number().int().describe("how many of the agent's leases lapsed together (re-queued, no attempt charged)"),
  })
  .nullable()
  .describe('null: no hold; otherwise several leases lapsed at once and it admits nothing until one of its workers is seen again');

export const AgentHold = z
  .object({
    reason: z.enum(ADMISSION_HOLDS).describe('the first hold admission finds, in the order it checks them'),
    summary: z.string().describe('the hold and its facts in words'),
    until: Timestamp.nullable().describe(
      'when it ends by itself (a budget window rolls, a breaker takes a probe); null: it waits for someone',
    ),
  })
  .nullable()
  .describe(
    'null: nothing holds the agent; otherwise it admits nothing (paused, lapse hold, budget spent, breaker open), as `waiting` would say',
  );

/** In every answer that created work (submit, trigger, webhook delivery): the work waits for a resume. */
export const AgentPaused = z.boolean().describe('true: the agent is paused; the work is queued and waits for a resume');

export const PauseBody = z.strictObject({
  reason: z
    .string()
    .min(1)
    .max(1000)
    .regex(TEXT_CHARS, TEXT_CHARS_MESSAGE)
    .describe('why it is paused: shown with the agent and with every execution waiting on it'),
});

export const WaitingReason = z.enum(WAITING_REASONS);

const SeatHolder = z.object({
  execution_id: z.string(),
  lease_owner: z.string().nullable(),
  lease_expires_at: Timestamp.nullable(),
  started_at: Timestamp.nullable(),
  running_seconds: z.number().int().nullable(),
});

export const Waiting = z
  .object({
    reason: WaitingReason.describe('the first reason it is not running (docs/concepts.md lists them in order)'),
    summary: z.string().describe('the reason and its facts in one sentence'),
    ahead: z.number().int().describe(`queued executions of the agent before it, in admission order (counted up to ${AHEAD_COUNT_CAP})`),
    ahead_capped: z.boolean().describe(`true: at least ${AHEAD_COUNT_CAP} are ahead ("${AHEAD_COUNT_CAP}+")`),
    backlog_expires_at: Timestamp.nullable().describe('when the reaper fails it as backlog_expired if it is still queued'),
    run_after: Timestamp.nullable(),
    paused: Paused,
    lapse: LapseHold,
    budget: z
      .object({ metric: z.string(), window: z.string(), limit: z.number(), spent: z.number(), resets_at: Timestamp })
      .nullable()
      .describe('budget_spent: the limit that is spent, and when its window rolls'),
    breaker: BreakerWaiting,
    serial: z.object({ serial_key: z.string(), execution_id: z.string() }).nullable().describe('serial_busy: the run it waits for'),
    seats: z
      .object({ max_parallel: z.number().int(), running: z.number().int(), holders: z.array(SeatHolder) })
      .nullable()
      .describe('seats_taken: who holds the seats (the longest-running first, at most 20)'),
    key: z
      .object({
        key: z.string(),
        max_parallel: z.number().int().nullable().describe("the key's cap (null: none)"),
        running: z.number().int().describe("the key's running executions"),
        holders: z.array(SeatHolder).describe("key_busy: who holds the key's seats (the longest-running first, at most 20)"),
        throttle: z.string().nullable().describe("the key's throttle in words (null: none)"),
        next_start_at: Timestamp.nullable().describe('key_throttled: when its throttle next admits a start'),
      })
      .nullable()
      .describe('key_busy, key_throttled: the limiting key'),
    last_claim_at: Timestamp.nullable().describe(
      `when a worker last claimed for the agent, to within a few seconds (no_worker: none for over ${NO_WORKER_AFTER_MS / 1000} s)`,
    ),
    push_error: z
      .object({ execution_id: z.string(), code: z.string(), message: z.string().nullable(), at: Timestamp.nullable() })
      .nullable()
      .describe("push_failing: the agent's last failed delivery"),
    throttle: FlowThrottleWaiting.nullable().describe("throttled: the agent's throttle and when it next admits a start"),
    pool: FlowPoolWaiting.nullable().describe(
      'pool_full, pool_turn, pool_throttled, pool_budget_spent: the pool that limits it, its seats and their holders (pool_turn: whose turn it is)',
    ),
  })
  .nullable()
  .describe('null unless queued: why it is not running yet');
export type Waiting = z.infer<typeof Waiting>;
