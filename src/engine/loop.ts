import type { EngineEvents } from './events.ts';

/**
 * The one loop helper: every background pass of a process (reaper, scheduler, dispatcher,
 * canary, alert delivery, idempotency purge, pruner) is a plain `…Once()` that tests and the CLI
 * call directly, run here on a jittered interval. `src/server/up.ts` lists them all.
 */

/**
 * What makes a pass leader-only: one process at a time holds it. LeaderLease (leader.ts) is one;
 * the canary keeps its lease in its own state row (Canary.lease) behind the same two methods.
 */
export interface Lease {
  /** Take or renew; true while this process holds it. */
  acquire(): Promise<boolean>;
  /** Hand it on at once (clean shutdown) rather than after it lapses. */
  release(): Promise<void>;
}

export interface LoopSpec {
  /** Names the loop in `loop:error`, logs and `baton_loop_errors_total{loop}`. */
  name: string;
  /**
   * The pass. Resolving to `{ nextInMs }` runs it again that soon when sooner than the interval.
   * `stopping` is aborted when the loop is stopped: a pass that runs several steps (the canary
   * catching up) ends after the step in hand rather than holding shutdown until its budget is spent.
   */
  once: (stopping: AbortSignal) => Promise<unknown>;
  intervalMs: number;
  /** ± this share of the interval, so processes sharing a database spread out. Default 0.2. */
  jitter?: number;
  /**
   * Leader-only: the pass runs only while this process holds the lease, taken or renewed just
   * before each pass and released on stop. Default: the pass runs in every process.
   */
  leader?: Lease;
  /** First pass at once rather than one interval after start (default false). */
  immediate?: boolean;
}

export interface LoopHandle {
  readonly name: string;
  stop(): Promise<void>;
}

/** How a failed pass is reported, from a timer or from a signal that started it: never thrown, never lost. */
export function reportLoopError(events: EngineEvents, loop: string, error: unknown): void {
  events.emit('loop:error', { loop, error });
}

/**
 * Run `spec.once` every `intervalMs` (± jitter). A loop never throws out of its timer: a failure
 * (of the pass or of taking the lease) is emitted as `loop:error` and the loop goes on.
 */
export function startLoop(spec: LoopSpec, events: EngineEvents): LoopHandle {
  const jitter = spec.jitter ?? 0.2;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let stopped = false;
  const stopping = new AbortController();
  const schedule = (soonerMs = Infinity) => {
    if (stopped) return;
    const jittered = spec.intervalMs * (1 - jitter + Math.random() * 2 * jitter);
    timer = setTimeout(tick, Math.min(jittered, soonerMs));
  };
  const pass = async (): Promise<unknown> => {
    if (spec.leader && !(await spec.leader.acquire())) return undefined;
    // Announced after it ends, ok or failed, so tracing can make one span per pass without the engine knowing about it.
    // A span's start for tracing, on this process's clock as OpenTelemetry's own timestamps are.
    // eslint-disable-next-line no-restricted-properties
    const startedAt = Date.now();
    const t0 = performance.now();
    try {
      const out = await spec.once(stopping.signal);
      events.emit('loop:pass', { loop: spec.name, startedAt, durationMs: performance.now() - t0 });
      return out;
    } catch (error) {
      events.emit('loop:pass', { loop: spec.name, startedAt, durationMs: performance.now() - t0, error });
      throw error;
    }
  };
  const tick = () => {
    running = pass()
      .then((out) => sooner(out))
      .catch((error) => {
        reportLoopError(events, spec.name, error);
        return undefined;
      })
      .then((soonerMs) => {
        running = undefined;
        schedule(soonerMs);
      });
  };
  if (spec.immediate) tick();
  else schedule();
  return {
    name: spec.name,
    async stop() {
      stopped = true;
      stopping.abort();
      clearTimeout(timer);
      await running;
      await spec.leader?.release().catch(() => undefined);
    },
  };
}

function sooner(out: unknown): number | undefined {
  const ms = (out as { nextInMs?: unknown } | null | undefined)?.nextInMs;
  return typeof ms === 'number' && ms >= 0 ? ms : undefined;
}
