/**
 * Fan-out with a join: the vocabularies of a group, defined once for the engine, the
 * API, the CLI, MCP and the dashboard, and the policy decision as a pure function.
 *
 * A group is N member executions created in one transaction, plus an optional join task created
 * exactly once when the group's policy decides. Counters move as members reach their final
 * state (a failed member with a retry to come is not final: its last retry's outcome counts).
 */

/**
 * How a group decides:
 * - `all`: when every member is final; succeeded if all succeeded, else failed.
 * - `all_succeeded`: failed at the first member that ends without success (the rest are
 *   cancelled); succeeded when all succeeded.
 * - `first_succeeded`: succeeded at the first success (the rest are cancelled); failed when all
 *   ended without one.
 * - `quorum` (k): succeeded at k successes; failed as soon as k can no longer be reached (the
 *   rest are cancelled either way).
 */
export const GROUP_POLICIES = Object.freeze(['all', 'all_succeeded', 'first_succeeded', 'quorum'] as const);
export type GroupPolicy = (typeof GROUP_POLICIES)[number];

/** A group's own status: running until its policy decides (or it is cancelled). */
export const GROUP_STATUSES = Object.freeze(['running', 'succeeded', 'failed', 'cancelled'] as const);
export type GroupStatus = (typeof GROUP_STATUSES)[number];

/** Why a group refused one of its items at creation (nothing was written). */
export const GROUP_ITEM_ERRORS = Object.freeze(['agent_not_found', 'backlog_full', 'duplicate_idempotency_key'] as const);
export type GroupItemError = (typeof GROUP_ITEM_ERRORS)[number];

/** Why a join spec produced no join task: recorded on the group (`join_refused`) and alerted. */
export const JOIN_REFUSALS = Object.freeze(['backlog_full', 'agent_missing', 'message_too_large', 'cancelled'] as const);
export type JoinRefusal = (typeof JOIN_REFUSALS)[number];

export const GROUP_LIMITS = Object.freeze({
  /**
   * Most members in one group. Every member is created in one transaction that holds each
   * member agent's new-work turn, so the bound keeps that turn short and the view readable.
   */
  maxSize: 1000,
  /**
   * Characters of members' results the join's payload carries in full, in member order. A
   * member past the budget has `result: null, result_omitted: true`; the join reads it by
   * execution id (a result may be megabytes; 1,000 of them would not fit one task).
   */
  joinResultsMaxChars: 4 * 1024 * 1024,
  /** Largest POST /v1/groups body: 1,000 small members fit many times over. */
  bodyLimitBytes: 8 * 1024 * 1024,
});

/** Page sizes of group lists (GET /v1/groups): the API refuses a larger `limit`. */
export const GROUP_PAGE = Object.freeze({ default: 50, max: 200 });

/** Members in their final state, and how many of those succeeded and failed (the rest were cancelled). */
export interface GroupCounts {
  size: number;
  finished: number;
  succeeded: number;
}

/**
 * The status a running group's policy reaches with these counts, or undefined while it has
 * not decided. `all_succeeded` is a quorum of `size`, `first_succeeded` a quorum of 1; `all`
 * waits for every member whatever the outcomes.
 */
export function decideGroup(
  policy: GroupPolicy,
  quorum: number | null,
  c: GroupCounts,
): Exclude<GroupStatus, 'running' | 'cancelled'> | undefined {
  if (policy === 'all') {
    if (c.finished < c.size) return undefined;
    return c.succeeded === c.size ? 'succeeded' : 'failed';
  }
  const k = policy === 'all_succeeded' ? c.size : policy === 'first_succeeded' ? 1 : (quorum ?? c.size);
  if (c.succeeded >= k) return 'succeeded';
  // Members not final yet may still succeed; once even all of them cannot make k, it failed.
  if (c.succeeded + (c.size - c.finished) < k) return 'failed';
  return undefined;
}
