import { z } from 'zod';
import type { BatonErrorCode } from './error-codes.ts';

/**
 * Retry policy: how often a `failed` execution is tried again, and how long to wait.
 * Set per agent, overridden per schedule, overridden per task; the effective one is copied onto
 * each execution at creation. `max_attempts` counts the first run: 1 means no retries.
 * Retry n (1-based) waits min(max_seconds, base_seconds * factor^(n-1)), shortened by up to
 * `jitter` (a fraction) at random so a burst of failures does not come back as a burst.
 */
export const RetryPolicy = z.strictObject({
  max_attempts: z.number().int().min(1).max(100).describe('runs in the chain including the first (1 = no retries)'),
  base_seconds: z.number().min(0).max(86_400).default(10).describe('wait before the first retry (default 10)'),
  factor: z.number().min(1).max(10).default(2).describe('each later wait is this many times longer (default 2)'),
  max_seconds: z
    .number()
    .min(0)
    .max(7 * 86_400)
    .default(3600)
    .describe('longest wait (default 3600)'),
  jitter: z.number().min(0).max(1).default(0.2).describe('up to this fraction of the wait is taken off at random (default 0.2)'),
});
export type RetryPolicy = z.infer<typeof RetryPolicy>;

/**
 * Error codes whose failure is never retried: nobody served the agent for a day
 * (`backlog_expired`), or a push agent refused the task with a 4xx (`push_rejected`: the same
 * request would be refused again).
 */
export const NOT_RETRIED: readonly BatonErrorCode[] = Object.freeze(['backlog_expired', 'push_rejected']);

/** Whether a failure with this code may be retried (by its retry policy). */
export const isRetriable = (code: string | null): boolean => !(NOT_RETRIED as readonly string[]).includes(code ?? '');

export function parsePolicy(text: string | null | undefined): RetryPolicy | null {
  if (!text) return null;
  const parsed = RetryPolicy.safeParse(JSON.parse(text));
  return parsed.success ? parsed.data : null;
}

/** Milliseconds to wait before retry number `n` (1-based). */
export function backoffMs(p: RetryPolicy, n: number, random: () => number = Math.random): number {
  const full = Math.min(p.max_seconds, p.base_seconds * p.factor ** Math.max(0, n - 1)) * 1000;
  return Math.round(full * (1 - p.jitter * random()));
}
