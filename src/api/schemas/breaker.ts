/** The circuit breaker of an agent (src/domain/breaker.ts): its setting and its state. */
import { z } from 'zod';
import { BREAKER_DEFAULTS, BREAKER_FAILURE_CLASSES, BREAKER_LIMITS, BREAKER_STATES } from '../../domain/breaker.ts';

const Timestamp = z.string().describe('ISO-8601 UTC timestamp');

const BreakerConfigShape = z
  .strictObject({
    consecutive: z
      .number()
      .int()
      .min(1)
      .max(BREAKER_LIMITS.maxConsecutive)
      .describe(`opens after this many counted failures in a row (default ${BREAKER_DEFAULTS.consecutive})`),
    ratio: z
      .number()
      .gt(0)
      .max(1)
      .describe(`…or when at least this share of the last \`window\` counted outcomes failed (default ${BREAKER_DEFAULTS.ratio})`),
    window: z
      .number()
      .int()
      .min(1)
      .max(BREAKER_LIMITS.maxWindow)
      .describe(`counted outcomes the ratio looks at, judged once full (default ${BREAKER_DEFAULTS.window})`),
    cooldown_ms: z
      .number()
      .int()
      .min(BREAKER_LIMITS.minCooldownMs)
      .max(BREAKER_LIMITS.maxCooldownMs)
      .describe(`how long it stays open before one probe is admitted (default ${BREAKER_DEFAULTS.cooldown_ms})`),
    max_cooldown_ms: z
      .number()
      .int()
      .min(BREAKER_LIMITS.minCooldownMs)
      .max(BREAKER_LIMITS.maxCooldownMs)
      .describe(`each failed probe doubles the cool-down up to this (default ${BREAKER_DEFAULTS.max_cooldown_ms})`),
    count: z
      .array(z.enum(BREAKER_FAILURE_CLASSES))
      .min(1)
      .describe('failure classes that count (default all): agent_error, timeout, poisoned; cancellations never count'),
  })
  .refine((c) => c.max_cooldown_ms >= c.cooldown_ms, { path: ['max_cooldown_ms'], message: 'must be at least cooldown_ms' });

/** In create and patch: the whole config, or null to turn the breaker off. Omitted at creation: the defaults. */
export const BreakerSetting = BreakerConfigShape.nullable()
  .optional()
  .describe('circuit breaker config; null: off (omitted at creation: on, with the defaults)');

export const Breaker = z
  .object({
    config: BreakerConfigShape,
    state: z.enum(BREAKER_STATES).describe('closed: admits; open: admits nothing until `until`; half_open: one probe at a time'),
    consecutive_failures: z.number().int().describe('counted failures in a row (closed)'),
    recent: z
      .object({ outcomes: z.number().int(), failures: z.number().int() })
      .describe('the window the ratio reads: its size (`window`; outcomes not counted yet count as successes) and the failures in it'),
    opened_at: Timestamp.nullable(),
    until: Timestamp.nullable().describe('open: when the next claim may take one probe (a past time: at the next claim)'),
    probe_execution_id: z.string().nullable().describe('half_open: the probe admitted'),
    cooldown_ms: z.number().int().nullable().describe('the current cool-down (doubles on each failed probe, capped)'),
  })
  .nullable()
  .describe('null: the breaker is off');

export const BreakerWaiting = z
  .object({ until: Timestamp.nullable(), probe_id: z.string().nullable() })
  .nullable()
  .describe('breaker_open: until when it stays open (null: half-open, its probe `probe_id` is running)');
