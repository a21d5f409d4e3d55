/** Concurrency keys (src/domain/flow.ts): a task's `key`, an agent's per-key limits, the live keys read. */
import { z } from 'zod';
import {
  DEBOUNCE_MAX_SECONDS,
  KEY_CAP_MAX,
  KEY_MAX_CHARS,
  KEY_OVERRIDES_MAX,
  KEY_PATTERN,
  KEY_PATTERN_MESSAGE,
} from '../../domain/flow.ts';
import { queryInt } from './query.ts';
import { THROTTLE_MAX_BURST, THROTTLE_MAX_LIMIT, THROTTLE_MAX_PERIOD_SECONDS } from '../../domain/throttle.ts';

const Timestamp = z.string().describe('ISO-8601 UTC timestamp');

export const FlowKey = z
  .string()
  .min(1)
  .max(KEY_MAX_CHARS)
  .regex(KEY_PATTERN, KEY_PATTERN_MESSAGE)
  .describe(`a concurrency key, e.g. user:42 (1 to ${KEY_MAX_CHARS} characters: ${KEY_PATTERN_MESSAGE})`);

/** What a submit may add for its key. */
export const submitKeyFields = {
  key: FlowKey.optional().describe('its concurrency key: caps, throttle, fairness, debounce and singleton apply per key'),
  debounce_seconds: z
    .number()
    .int()
    .min(1)
    .max(DEBOUNCE_MAX_SECONDS)
    .optional()
    .describe(
      "with `key`: fold into the key's queued, not yet due, debounced task (its message and payload become this submit's, its start moves to now + window; the answer says debounced: true), or queue one that starts after the window",
    ),
  singleton: z
    .boolean()
    .optional()
    .describe('with `key`: refuse with 409 already_running (naming the live execution) while the key has a queued or running task'),
};

export const KeyThrottle = z
  .strictObject({
    limit: z.number().int().min(1).max(THROTTLE_MAX_LIMIT).describe('starts allowed per period'),
    period_seconds: z.number().int().min(1).max(THROTTLE_MAX_PERIOD_SECONDS).describe('the period, in seconds'),
    burst: z
      .number()
      .int()
      .min(0)
      .max(THROTTLE_MAX_BURST)
      .default(0)
      .describe('extra starts allowed at once after a quiet spell (default 0)'),
  })
  .describe('starts per period (the generic cell rate algorithm: starts in any window of one period are at most limit + burst)');

/** The per-key settings of an agent, in create and patch. */
export const agentKeySettings = {
  key_max_parallel: z
    .number()
    .int()
    .min(1)
    .max(KEY_CAP_MAX)
    .nullable()
    .optional()
    .describe('the cap on running tasks of every key (null: none)'),
  key_overrides: z
    .record(FlowKey, z.number().int().min(1).max(KEY_CAP_MAX))
    .refine((o) => Object.keys(o).length <= KEY_OVERRIDES_MAX, { error: `at most ${KEY_OVERRIDES_MAX} keys` })
    .nullable()
    .optional()
    .describe('caps of single keys, over key_max_parallel: {"key": cap}'),
  key_throttle: KeyThrottle.nullable().optional().describe('a throttle applied to each key separately (null: none)'),
};

export const AgentKeySettings = z.object({
  key_max_parallel: z.number().int().nullable(),
  key_overrides: z.record(z.string(), z.number().int()).nullable(),
  key_throttle: z.object({ limit: z.number().int(), period_seconds: z.number().int(), burst: z.number().int() }).nullable(),
});

export const LiveKey = z.object({
  key: z.string(),
  running: z.number().int().describe('seats in use'),
  queued: z.number().int().describe('queue depth'),
  max_parallel: z.number().int().nullable().describe("the key's cap (null: none)"),
  throttled_until: Timestamp.nullable().describe('when its throttle next admits a start (null: it admits now, or no throttle)'),
});
export const LiveKeysQuery = z.strictObject({
  limit: queryInt(1, 500).optional().describe('page size (default 100, at most 500)'),
  cursor: z.string().max(KEY_MAX_CHARS).optional().describe('next_cursor of the previous page'),
});
export const LiveKeys = z.object({
  agent: z.string(),
  keys: z.array(LiveKey).describe('the live keys (a queued or running task), in key order'),
  next_cursor: z.string().nullable(),
});
