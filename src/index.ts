/**
 * The server package's API (`import … from 'baton'`): embed the engine or a whole `baton up` in
 * a process. It exports only what the server owns. An agent imports the SDK package instead
 * (`@baton/sdk`, built from src/sdk.ts: createWorker, BatonClient, the domain lists), which
 * brings none of the server's dependencies.
 *
 * - Engine, openStore: the engine over a store, in-process
 * - startNode: a whole `baton up` (HTTP API, background loops) in-process
 * - Dispatcher, lazySecretBox: push delivery for an embedded engine
 */
export { Engine, type EngineOptions, type SubmitInput, type ClaimOptions } from './engine/engine.ts';
export type { AgentInput } from './engine/agents.ts';
export { openStore, type OpenStoreOptions } from './store/open.ts';
export type { StoreAdapter, StoreKind } from './store/adapter.ts';
export { startNode, type BatonNode, type StartOptions } from './server/up.ts';
export { Dispatcher, type DispatcherOptions } from './delivery/dispatcher.ts';
/** An embedded Engine stores push secrets only with a box: `new Engine({ store, secrets: lazySecretBox(dataDir) })`. */
export { lazySecretBox, type SecretBox } from './delivery/secrets.ts';
export { BatonError, type ErrorCode } from './domain/errors.ts';
export { EXECUTION_STATES, TERMINAL_STATES, isTerminal, type ExecutionStatus } from './domain/states.ts';
