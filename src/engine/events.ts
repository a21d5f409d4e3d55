import { EventEmitter } from 'node:events';
import type { ExecutionRow } from '../store/schema.ts';
import type { Fired, Reaped } from '../domain/outcomes.ts';

/** Every event the engine's subsystems emit, `subsystem:verb`. */
export interface EngineEventMap {
  'execution:changed': [{ id: string; agent: string; status: string }];
  'reaper:reaped': [Reaped[]];
  /** The due times one committed scheduler batch handled (metrics count them). */
  'scheduler:fired': [Fired[]];
  /** Rows this process just admitted (queued → running), and a row it just completed (metrics). */
  'execution:admitted': [ExecutionRow[]];
  'execution:completed': [ExecutionRow];
  /** A background pass (or a signal-started one) failed; it runs again on its next interval. */
  'loop:error': [{ loop: string; error: unknown }];
}

export class EngineEvents extends EventEmitter<EngineEventMap> {
  constructor() {
    super();
    this.setMaxListeners(0);
  }
}
