import type { StoreAdapter } from '../store/adapter.ts';

/**
 * What the engine's sub-services (engine.schedules, engine.webhooks) need of the engine: its
 * store and its clock. The Engine passes itself; typing it as this instead of `Engine` keeps
 * engine.ts → triggers/*.ts a one-way import.
 */
export interface EngineContext {
  readonly store: StoreAdapter;
  /** Milliseconds since the epoch, from the engine's (injectable) clock. */
  now(): number;
}
