import { EventEmitter } from 'node:events';
import type { Reaped } from './transitions/expire.ts';

/** Every event the engine's subsystems emit, `subsystem:verb`. */
export interface EngineEventMap {
  'execution:changed': [{ id: string; agent: string; status: string }];
  'reaper:reaped': [Reaped[]];
  'loop:error': [{ loop: string; error: unknown }];
}

export class EngineEvents extends EventEmitter<EngineEventMap> {
  constructor() {
    super();
    this.setMaxListeners(0);
  }
}
