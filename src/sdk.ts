/**
 * What an agent imports: the entry of the SDK package (packages/sdk, published as `@baton/sdk`).
 * It reaches only the agent layer, the wire contract and the domain (.dependency-cruiser.cjs's
 * `sdk-stays-small` rule), so installing it brings zod and nothing of the server: no Fastify,
 * no database driver, no dashboard.
 *
 * - createWorker: run an agent's tasks over HTTP (claim, heartbeat, logs, complete)
 * - commandRunner: a handler that runs a command per task, as `baton worker` does
 * - BatonClient: a typed client for the whole HTTP API
 * - the lists the API speaks in (states, error codes, delivery modes, policies, page sizes)
 */
export {
  createWorker,
  outcome,
  TaskAborted,
  backoffMs,
  isTransient,
  type Worker,
  type WorkerOptions,
  type WorkerEvent,
  type Handler,
  type Task,
  type TaskOutcome,
  type AbortReason,
  type Usage,
} from './worker/sdk.ts';
export { commandRunner, resolveCommand, RESULT_LIMIT_BYTES, type CommandOptions, type CommandRunner } from './worker/command.ts';
export {
  BatonClient,
  ApiError,
  Unreachable,
  type ClientOptions,
  type Agent,
  type AgentCreate,
  type AgentPatch,
  type ApiKey,
  type ApiKeyCreated,
  type CanaryCycle,
  type CanaryStatus,
  type CanaryViolation,
  type ClaimBody,
  type CompleteBody,
  type Completed,
  type BatchItem,
  type BatchItemAnswer,
  type SubmitBatchAnswer,
  type Created,
  type Execution,
  type ExecutionDetail,
  type ExecutionListItem,
  type ExecutionPage,
  type Heartbeat,
  type LogAppendResult,
  type LogLine,
  type LogPage,
  type Schedule,
  type ScheduleListItem,
  type ScheduleCreate,
  type SchedulePatch,
  type SubmitBody,
  type Triggered,
  type Webhook,
  type WebhookListItem,
  type WebhookCreate,
  type WebhookCreated,
  type Task as ClaimedTask,
} from './client.ts';
export { readSse, type SseEvent } from './sse.ts';
export {
  EXECUTION_STATES,
  TERMINAL_STATES,
  COMPLETION_STATES,
  TRIGGER_KINDS,
  isTerminal,
  type ExecutionStatus,
  type TerminalStatus,
  type CompletionStatus,
  type TriggerKind,
} from './domain/states.ts';
export { BATON_ERROR_CODES, type BatonErrorCode, type ExecutionErrorCode } from './domain/error-codes.ts';
export type { ApiErrorCode } from './domain/errors.ts';
export { DELIVERY_MODES, type DeliveryMode } from './domain/delivery.ts';
export { OVERLAP_POLICIES, MISFIRE_POLICIES, type OverlapPolicy, type MisfirePolicy } from './domain/policies.ts';
export { RetryPolicy } from './domain/retry.ts';
export { EXECUTION_PAGE } from './domain/lists.ts';
export { CONTRACT_DEFAULTS } from './domain/defaults.ts';
