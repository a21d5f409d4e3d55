/** Budgets (src/domain/budget.ts): the `budget` setting of an agent and GET /v1/agents/{agent}/budget. */
import { z } from 'zod';
import { BUDGET_ALERT_RATIO, BUDGET_MAX_LIMITS, BUDGET_METRICS, BUDGET_WINDOWS, isTimeZone } from '../../domain/budget.ts';

const Timestamp = z.string().describe('ISO-8601 UTC timestamp');

export const BudgetLimit = z.strictObject({
  metric: z
    .enum(BUDGET_METRICS)
    .describe('cost_usd and total_tokens: from the usage completions report; run_seconds: from their durations'),
  window: z.enum(BUDGET_WINDOWS).describe("hour, day or calendar month, on the budget's time zone's wall clock"),
  limit: z.number().positive().max(1e15).describe('spending allowed per window (dollars, tokens or seconds)'),
});

export const Budget = z
  .strictObject({
    time_zone: z
      .string()
      .max(100)
      .refine(isTimeZone, 'must be an IANA time zone name, such as Europe/Berlin')
      .optional()
      .describe('IANA time zone the windows start in (default UTC)'),
    limits: z
      .array(BudgetLimit)
      .min(1)
      .max(BUDGET_MAX_LIMITS)
      .refine((ls) => new Set(ls.map((l) => `${l.metric}/${l.window}`)).size === ls.length, 'at most one limit per metric and window'),
  })
  .describe(
    `per-window spending limits: when one is spent the agent admits nothing until its window rolls or the limit is raised (running work finishes); an alert fires once per window at ${BUDGET_ALERT_RATIO * 100} %`,
  );

/** In AgentCreate and AgentPatch: null removes the budget. */
export const BudgetSetting = Budget.nullable().optional();

export const BudgetLimitStatus = z.object({
  metric: z.enum(BUDGET_METRICS),
  window: z.enum(BUDGET_WINDOWS),
  limit: z.number(),
  spent: z.number().describe('spending in the current window (it may pass the limit by what running tasks cost)'),
  remaining: z.number().describe('limit minus spent, never below 0'),
  spent_ratio: z.number().describe('spent / limit'),
  window_start: Timestamp,
  resets_at: Timestamp.describe('when the current window ends and a new one starts at 0'),
});

export const BudgetAnswer = z.object({
  agent: z.string(),
  time_zone: z.string(),
  spent: z.boolean().describe('true: a limit is spent and the agent admits nothing'),
  limits: z.array(BudgetLimitStatus).describe('empty: the agent has no budget'),
});
export type BudgetAnswer = z.infer<typeof BudgetAnswer>;
