import type { Engine } from '../engine.ts';
import { Schedules } from './schedules.ts';
import { Webhooks } from './webhooks.ts';

export interface Triggers {
  schedules: Schedules;
  webhooks: Webhooks;
}

const byEngine = new WeakMap<Engine, Triggers>();

/** The trigger services of an engine (created on first use; they hold no state of their own). */
export function triggersFor(engine: Engine): Triggers {
  let t = byEngine.get(engine);
  if (!t) {
    t = { schedules: new Schedules(engine), webhooks: new Webhooks(engine) };
    byEngine.set(engine, t);
  }
  return t;
}

export { tickSchedulesOnce } from './scheduler.ts';
