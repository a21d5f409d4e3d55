/**
 * The `error_code`s Baton itself writes on executions, defined once. A worker may report any
 * code of its own on completion, so the column and the completion body stay open strings
 * (`ExecutionErrorCode`); every code Baton writes is one of these, checked by the compiler.
 */
export const BATON_ERROR_CODES = Object.freeze([
  // Written by the engine (transitions and the reaper).
  'missed', // skipped: a schedule tick handled too late (a process was down) and not the one catch-up run
  'already_running', // skipped: a schedule tick while a run of it is in flight (overlap policy skip)
  'backlog_full', // skipped: a schedule tick while the agent's backlog was full (max_backlog)
  'cancelled_by_user', // cancelled while queued, on request (POST /v1/executions/:id/cancel)
  'agent_deleted', // cancelled while queued: its agent was deleted
  'schedule_deleted', // cancelled while queued: its schedule was deleted
  'group_decided', // cancelled while queued: its group's policy decided without it (first success, first failure, quorum)
  'group_cancelled', // cancelled while queued: its group was cancelled
  'cancel_requested', // cancelled: a running row whose cancellation was requested stopped, or its lease lapsed
  'cancel_forced', // cancelled: the worker did not stop within the grace period after a cancel request
  'timeout', // failed: ran past its deadline (the reaper, the push dispatcher or the worker SDK noticed)
  'poisoned', // failed: its lease lapsed on more deliveries than max_redeliveries
  'backlog_expired', // failed: queued longer than the backlog expiry without being admitted
  'failed', // failed: a worker reported failure without a code
  // Written by the push dispatcher for a push agent.
  'push_url_missing', // failed: the agent uses push delivery but has no push_url
  'push_secret_unreadable', // failed: the agent's signing secret was sealed with another BATON_SECRET_KEY than this process's
  'push_aborted', // failed: the push request was aborted (lease lost or shutdown) before an answer
  'push_unreachable', // failed: the POST did not get an HTTP answer (connection refused, reset, DNS…)
  'push_invalid_response', // failed: a 2xx whose body is too large, too deep, not JSON or has an unknown status
  'push_rejected', // failed: the agent answered 4xx (never retried: it would refuse again)
  'push_server_error', // failed: the agent answered 5xx
  'push_unexpected_status', // failed: the agent answered neither 2xx, 4xx nor 5xx
  'agent_failed', // failed: the push agent answered status failed without a code
  'cancelled', // cancelled: the push agent answered status cancelled without a code
  // Written by Baton's worker SDK and command runner on the worker's behalf.
  'handler_error', // failed: the handler threw (without a code of its own) or never returned
  'invalid_outcome', // failed: the server refused the handler's outcome (too large, bad usage…)
  'spawn_failed', // failed: the command could not be started (ENOENT, EACCES)
  'stopped', // failed: the command's process group was signalled to stop (cancel, deadline, shutdown)
  'killed_by_signal', // failed: the command was killed by a signal Baton did not send
  'exit_code', // failed: the command exited non-zero
] as const);

export type BatonErrorCode = (typeof BATON_ERROR_CODES)[number];

/** What an execution's `error_code` may hold: one of Baton's codes, or any code a worker reported. */
export type ExecutionErrorCode = BatonErrorCode | (string & {});

/** Why a queued execution was cancelled (the cancel transitions' `reason`). */
export type CancelReason = Extract<
  BatonErrorCode,
  'cancelled_by_user' | 'agent_deleted' | 'schedule_deleted' | 'group_decided' | 'group_cancelled'
>;

/** Why a schedule tick left a skipped row instead of a run. */
export type SkipReason = Extract<BatonErrorCode, 'missed' | 'already_running' | 'backlog_full'>;
