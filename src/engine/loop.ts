import type { EngineEvents } from './events.ts';

export interface LoopHandle {
  stop(): Promise<void>;
}

/**
 * Run `once` every `intervalMs` (±20 % jitter, so processes sharing a database spread out).
 * A loop never throws out of its timer: failures are emitted as `loop:error` and it goes on.
 */
export function startLoop(name: string, once: () => Promise<unknown>, intervalMs: number, events: EngineEvents): LoopHandle {
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let stopped = false;
  const schedule = () => {
    if (stopped) return;
    const jittered = intervalMs * (0.8 + Math.random() * 0.4);
    timer = setTimeout(tick, jittered);
  };
  const tick = () => {
    running = once()
      .then(() => undefined)
      .catch((error) => {
        events.emit('loop:error', { loop: name, error });
      })
      .finally(() => {
        running = undefined;
        schedule();
      });
  };
  schedule();
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
