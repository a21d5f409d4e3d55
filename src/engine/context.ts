import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { ExecutionRow } from '../store/schema.ts';
import type { Followed } from './composition/follow.ts';

/**
 * What the engine's sub-services (engine.schedules, engine.webhooks) need of the engine: its
 * store and its clock. The Engine passes itself; typing it as this instead of `Engine` keeps
 * engine.ts → triggers/*.ts a one-way import.
 */
export interface EngineContext {
  readonly store: StoreAdapter;
  /** Milliseconds since the epoch, from the engine's (injectable) clock: by default the store's (StoreAdapter.now). */
  now(): number;
  /** Follow rows that just reached their final state in `tx` (see Engine.follow); announce what it returns after the commit. */
  follow(tx: Tx, now: number, actor: string, rows: readonly ExecutionRow[]): Promise<Followed>;
}
