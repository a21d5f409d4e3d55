/**
 * Baton's public API (the package's main export).
 *
 * - createWorker: the TypeScript worker SDK (run an agent's tasks over HTTP)
 * - BatonClient: a typed client for the HTTP API
 * - Engine, openStore, startNode: embed the engine or a whole `baton up` in a process
 */
export {
  createWorker,
  outcome,
  TaskAborted,
  backoffMs,
  type Worker,
  type WorkerOptions,
  type WorkerEvent,
  type Handler,
  type Task,
  type TaskOutcome,
  type AbortReason,
  type Usage,
} from './worker/sdk.ts';
export { commandRunner, resolveCommand, type CommandOptions, type CommandRunner } from './worker/command.ts';
export {
  BatonClient,
  ApiError,
  Unreachable,
  type ClientOptions,
  type Agent,
  type AgentCreate,
  type AgentPatch,
  type Execution,
  type ExecutionDetail,
  type ExecutionPage,
  type SubmitBody,
  type Created,
  type Heartbeat,
  type LogLine,
  type LogPage,
  type Task as ClaimedTask,
} from './client.ts';
export { Engine, type EngineOptions, type AgentInput, type SubmitInput, type ClaimOptions } from './engine/engine.ts';
export { openStore, type OpenStoreOptions } from './store/open.ts';
export type { StoreAdapter, StoreKind } from './store/adapter.ts';
export { startNode, type BatonNode, type StartOptions } from './server/up.ts';
export { Dispatcher, type DispatcherOptions } from './delivery/dispatcher.ts';
/** An embedded Engine stores push secrets only with a box: `new Engine({ store, secrets: lazySecretBox(dataDir) })`. */
export { lazySecretBox, type SecretBox } from './delivery/secrets.ts';
export { BatonError, type ErrorCode } from './domain/errors.ts';
export { EXECUTION_STATES, TERMINAL_STATES, isTerminal, type ExecutionStatus } from './domain/states.ts';
