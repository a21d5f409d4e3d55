import { EventEmitter } from 'node:events';
import type { ExecutionRow } from '../store/schema.ts';
import type { Reaped } from './transitions/expire.ts';
import type { Fired } from './triggers/scheduler.ts';

/** Every event the engine's subsystems emit, `subsystem:verb`. */
export interface EngineEventMap {
  'execution:changed': [{ id: string; agent: string; status: string }];
  'reaper:reaped': [Reaped[]];
  'scheduler:fired': [Fired[]];
  /** Rows this process just admitted (queued → running), and a row it just completed (metrics). */
  'execution:admitted': [ExecutionRow[]];
  'execution:completed': [ExecutionRow];
  'loop:error': [{ loop: string; error: unknown }];
}

export class EngineEvents extends EventEmitter<EngineEventMap> {
  constructor() {
    super();
    this.setMaxListeners(0);
  }
}
