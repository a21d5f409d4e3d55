import type { EngineEvents } from './events.ts';

export interface LoopHandle {
  stop(): Promise<void>;
}

/**
 * Run `once` every `intervalMs` (±20 % jitter, so processes sharing a database spread out).
 * A pass that resolves to `{ nextInMs }` runs again that soon when it is sooner (the scheduler,
 * for the next due time). A loop never throws out of its timer: failures are emitted as
 * `loop:error` and it goes on.
 */
export function startLoop(name: string, once: () => Promise<unknown>, intervalMs: number, events: EngineEvents): LoopHandle {
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let stopped = false;
  const schedule = (soonerMs = Infinity) => {
    if (stopped) return;
    const jittered = intervalMs * (0.8 + Math.random() * 0.4);
    timer = setTimeout(tick, Math.min(jittered, soonerMs));
  };
  const tick = () => {
    running = once()
      .then((out) => sooner(out))
      .catch((error) => {
        events.emit('loop:error', { loop: name, error });
        return undefined;
      })
      .then((soonerMs) => {
        running = undefined;
        schedule(soonerMs);
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

function sooner(out: unknown): number | undefined {
  const ms = (out as { nextInMs?: unknown } | null | undefined)?.nextInMs;
  return typeof ms === 'number' && ms >= 0 ? ms : undefined;
}
