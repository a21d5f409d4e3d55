/** Pools (src/domain/pools.ts) and throttles (src/domain/throttle.ts): settings, answers, and their part of `waiting`. */
import { z } from 'zod';
import { MAX_POOLS_PER_AGENT, POOL_NAME_PATTERN } from '../../domain/pools.ts';
import { THROTTLE_MAX_BURST, THROTTLE_MAX_LIMIT, THROTTLE_MAX_PERIOD_SECONDS } from '../../domain/throttle.ts';
import { Budget, BudgetLimitStatus } from './budget.ts';
import { Text } from './text.ts';

const Timestamp = z.string().describe('ISO-8601 UTC timestamp');

export const PoolName = z
  .string()
  .regex(POOL_NAME_PATTERN, 'must be 1-63 characters: lowercase letters, digits and dashes, starting with a letter or digit');

export const Throttle = z
  .strictObject({
    limit: z.number().int().min(1).max(THROTTLE_MAX_LIMIT).describe('starts allowed per period (at least 1)'),
    period_seconds: z.number().int().min(1).max(THROTTLE_MAX_PERIOD_SECONDS).describe('the period, in seconds'),
    burst: z.number().int().min(0).max(THROTTLE_MAX_BURST).default(0).describe('extra starts allowed at once after a quiet spell'),
  })
  .describe('at most `limit` starts per `period_seconds` (plus `burst` after a quiet spell); queued work waits, nothing is dropped');

/** In AgentCreate and AgentPatch. */
export const ThrottleSetting = Throttle.nullable().optional().describe('starts per period; null: none');
export const PoolsSetting = z
  .array(PoolName)
  .max(MAX_POOLS_PER_AGENT)
  .optional()
  .describe('the pools it draws from (each must exist): a task starts only when every one has room; [] draws from none');

const poolSettings = {
  description: Text.max(1000).nullable().optional(),
  max_parallel: z
    .number()
    .int()
    .min(0)
    .max(100_000)
    .nullable()
    .optional()
    .describe('seats shared by its agents’ running tasks; null: no limit'),
  throttle: ThrottleSetting,
  budget: Budget.nullable().optional().describe('per-window usage limits spent by its agents’ completions; null: none'),
};
export const PoolCreate = z.strictObject({ name: PoolName, ...poolSettings });
export const PoolPatch = z.strictObject(poolSettings);
export type PoolCreate = z.infer<typeof PoolCreate>;
export type PoolPatch = z.infer<typeof PoolPatch>;
export const PoolParams = z.strictObject({ pool: PoolName });

export const FlowThrottleWaiting = z.object({
  limit: z.number().int(),
  period_seconds: z.number().int(),
  burst: z.number().int(),
  next_admit_at: Timestamp.describe('when it next admits a start'),
});

export const FlowPoolWaiting = z.object({
  name: z.string(),
  max_parallel: z.number().int().nullable(),
  in_use: z.number().int().describe('running tasks of the agents that draw from it'),
  holders: z
    .array(
      z.object({
        execution_id: z.string(),
        agent: z.string(),
        started_at: Timestamp.nullable(),
        running_seconds: z.number().int().nullable(),
      }),
    )
    .describe('who holds its seats (the longest-running first, at most 20)'),
  throttle: FlowThrottleWaiting.nullable(),
  turn: z
    .object({
      agent: z.string().describe('the member a free seat is held for: it has waited longest'),
      waiting_since: Timestamp,
      waiting: z.number().int().describe('members ahead of this agent for a seat'),
    })
    .nullable()
    .describe('pool_turn: whose turn a free seat is held for'),
});

export const Pool = z.object({
  name: z.string(),
  description: z.string().nullable(),
  max_parallel: z.number().int().nullable(),
  throttle: Throttle.nullable(),
  budget: Budget.nullable(),
  created_at: Timestamp,
  updated_at: Timestamp,
});

export const PoolUsage = Pool.extend({
  agents: z.array(z.string()).describe('the agents that draw from it, in name order'),
  in_use: z.number().int().describe('seats in use: the running tasks of its agents'),
  throttle_next_admit_at: Timestamp.nullable().describe('when its throttle next admits a start (null: no throttle)'),
  budget_limits: z.array(BudgetLimitStatus).describe('each budget limit with its current window (empty: no budget)'),
});
export const PoolList = z.object({ pools: z.array(Pool).describe('in name order') });
