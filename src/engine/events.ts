import { EventEmitter } from 'node:events';
import type { ExecutionRow } from '../store/schema.ts';
import type { Fired, Reaped } from '../domain/outcomes.ts';

/** Every event the engine's subsystems emit, `subsystem:verb`. */
export interface EngineEventMap {
  /**
   * A status change, from this process or another (via the store's signals). `local`: this process
   * made it, so a listener that must act once per change across processes (tracing) acts on these.
   */
  'execution:changed': [{ id: string; agent: string; status: string; local: boolean }];
  'reaper:reaped': [Reaped[]];
  /** The due times one committed scheduler batch handled (metrics count them). */
  'scheduler:fired': [Fired[]];
  /** Rows this process just admitted (queued → running), and a row it just completed (metrics). */
  'execution:admitted': [ExecutionRow[]];
  'execution:completed': [ExecutionRow];
  /** A background pass (or a signal-started one) failed; it runs again on its next interval. */
  'loop:error': [{ loop: string; error: unknown }];
  /** A write failed for lack of disk space (store-space.ts); `first`: the store was not known full before. */
  'store:full': [{ code: string; message: string; first: boolean }];
  /** A probe write committed after the store was full: space is back (store-space.ts). */
  'store:space': [{ fullForMs: number }];
  /**
   * A background pass ran on the loop helper (not emitted when a leader-only pass was skipped for
   * want of the lease): when it started (ms since the epoch), how long it took, and its failure if
   * it failed. src/telemetry/ makes one span of each.
   */
  'loop:pass': [{ loop: string; startedAt: number; durationMs: number; error?: unknown }];
}

export class EngineEvents extends EventEmitter<EngineEventMap> {
  constructor() {
    super();
    this.setMaxListeners(0);
  }
}
