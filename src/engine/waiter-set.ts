import type { ClaimRequest } from '../store/fast-paths.ts';
import type { ExecutionRow } from '../store/schema.ts';

/**
 * Why a waiting claimer was woken: `signal` (work queued, a seat freed, the agent changed), or
 * `poll` (the safety re-check, or a throttle reopening: nobody said there is work, so a claimer
 * that finds some passes the look on to the next claimer of its agent), or `taken` (a submit of
 * its agent runs the claim in its own call: ClaimWaits.takeParked).
 */
export type Wake = 'signal' | 'poll' | 'taken';

/** The claim a parked claimer would make, without its agent and time (both given when it is made). */
export type ParkedRequest = Omit<ClaimRequest, 'id' | 'now'>;

/** A parked claim a submit took (ClaimWaits.takeParked): its request, and how its answer reaches it. */
export interface TakenClaim {
  request: ParkedRequest;
  /** The rows the call admitted to it, or undefined (not decided, or the call failed): it then looks itself. Call once. */
  settle(rows: ExecutionRow[] | undefined): void;
}

/** An armed waiter: how to wake it, and while it is parked, the claim a submit may take. */
interface Armed {
  signal: AbortSignal | undefined;
  offer: TakenClaim | undefined;
  /** Its look found no queued row of its agent: a freed seat gives it nothing, work queued does. */
  nothingQueued: boolean;
}

/**
 * Long-poll wake-ups. A claimer arms a waiter *before* it looks at the queue, so a signal that
 * lands between "nothing admissible" and "start waiting" is not lost.
 */
export class Waiters {
  /** Per agent, its armed waiters in the order they armed (a claimer re-arms after each look). */
  private readonly byAgent = new Map<string, Map<(why: Wake, work: readonly string[]) => void, Armed>>();

  /**
   * Wake one waiter of `agent`, the one armed longest (one queued task or one freed seat is work
   * for one claimer; waking them all makes every loser queue on the agent lock), or all of them
   * (`everyone`, e.g. after the cap was raised). `work`: the executions just queued that the wake
   * is for (the woken claimer passes the wake on if its look takes none of them).
   */
  wake(agent: string, everyone = false, why: Wake = 'signal', work: readonly string[] = []): boolean {
    const set = this.byAgent.get(agent);
    if (!set) return false;
    for (const fire of set.keys()) {
      set.delete(fire);
      fire(why, work);
      if (!everyone) break;
    }
    if (set.size === 0) this.byAgent.delete(agent);
    return true;
  }

  /**
   * A seat of `agent` freed: wake the waiter armed longest whose look did not find the agent's
   * queue empty. One that found it empty stays parked: only work queued can give it anything, and
   * that is announced (wake). Woken, it would look and find nothing: a worker whose claim waits
   * while its own tasks run would cost the server such a look per task it completes.
   */
  wakeForSeat(agent: string): void {
    const set = this.byAgent.get(agent);
    if (!set) return;
    for (const [fire, armed] of set) {
      if (armed.nothingQueued) continue;
      set.delete(fire);
      if (set.size === 0) this.byAgent.delete(agent);
      fire('signal', []);
      return;
    }
  }

  /**
   * Take the parked claim of `agent` that offers itself and armed longest, its caller still there:
   * it is woken as `taken` and waits for its answer (TakenClaim.settle).
   */
  take(agent: string): TakenClaim | undefined {
    const set = this.byAgent.get(agent);
    if (!set) return undefined;
    for (const [fire, armed] of set) {
      if (!armed.offer || armed.signal?.aborted) continue;
      set.delete(fire);
      if (set.size === 0) this.byAgent.delete(agent);
      fire('taken', []);
      return armed.offer;
    }
    return undefined;
  }

  /**
   * Arm `fire` on `agent` until it fires or is disarmed: the bare form of arm(), for a claim that
   * waits on several agents with one timer of its own (claim-any.ts). `offer(undefined)` withdraws
   * an offer made (take).
   */
  attach(
    agent: string,
    fire: (why: Wake, work: readonly string[]) => void,
    signal?: AbortSignal,
  ): { disarm(): void; nothingQueued(): void; offer(o: TakenClaim | undefined): void } {
    let set = this.byAgent.get(agent);
    if (!set) this.byAgent.set(agent, (set = new Map()));
    const armed: Armed = { signal, offer: undefined, nothingQueued: false };
    set.set(fire, armed);
    return {
      disarm: () => {
        const s = this.byAgent.get(agent);
        s?.delete(fire);
        if (s && s.size === 0) this.byAgent.delete(agent);
      },
      nothingQueued: () => void (armed.nothingQueued = true),
      offer: (o) => void (armed.offer = o),
    };
  }

  /** The agents that have an armed waiter. */
  agents(): string[] {
    return [...this.byAgent.keys()];
  }

  /**
   * Returns `wait(ms)`, resolving early, with why, when `agent` is woken after this call; and
   * `offer(o)`: until woken, a submit of `agent` may take the claim `o` (take).
   */
  arm(
    agent: string,
    signal?: AbortSignal,
  ): {
    wait: (ms: number) => Promise<Wake | undefined>;
    disarm: () => void;
    offer: (o: TakenClaim) => void;
    /** Its look found the agent's queue empty (see wakeForSeat). */
    nothingQueued: () => void;
    /** The executions just queued that the wake-up, if any, was for (Waiters.wake's `work`). */
    work: () => readonly string[];
  } {
    let fired: Wake | undefined;
    let work: readonly string[] = [];
    let resolve: (() => void) | undefined;
    const fire = (why: Wake, w: readonly string[]) => {
      fired = why;
      work = w;
      resolve?.();
    };
    const { disarm, nothingQueued, offer } = this.attach(agent, fire, signal);
    const wait = (ms: number) =>
      new Promise<Wake | undefined>((res) => {
        if (fired || signal?.aborted) return res(fired);
        const timer = setTimeout(done, ms);
        function done() {
          clearTimeout(timer);
          signal?.removeEventListener('abort', done);
          res(fired);
        }
        resolve = done;
        signal?.addEventListener('abort', done, { once: true });
      });
    return { wait, disarm, offer, nothingQueued, work: () => work };
  }
}
