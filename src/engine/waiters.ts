/**
 * Long-poll wake-ups. A claimer arms a waiter *before* it looks at the queue, so a signal that
 * lands between "nothing admissible" and "start waiting" is not lost.
 */
export class Waiters {
  private readonly byAgent = new Map<string, Set<() => void>>();

  /**
   * Wake one waiter of `agent` (one queued task or one freed seat is work for one claimer;
   * waking them all makes every loser queue on the agent lock), or all of them (`everyone`,
   * e.g. after the cap was raised).
   */
  wake(agent: string, everyone = false): void {
    const set = this.byAgent.get(agent);
    if (!set) return;
    for (const fire of set) {
      set.delete(fire);
      fire();
      if (!everyone) break;
    }
    if (set.size === 0) this.byAgent.delete(agent);
  }

  /** Returns `wait(ms)`, resolving early when `agent` is signalled after this call. */
  arm(agent: string, signal?: AbortSignal): { wait: (ms: number) => Promise<void>; disarm: () => void } {
    let fired = false;
    let resolve: (() => void) | undefined;
    const fire = () => {
      fired = true;
      resolve?.();
    };
    let set = this.byAgent.get(agent);
    if (!set) this.byAgent.set(agent, (set = new Set()));
    set.add(fire);
    const disarm = () => {
      const s = this.byAgent.get(agent);
      s?.delete(fire);
      if (s && s.size === 0) this.byAgent.delete(agent);
    };
    const wait = (ms: number) =>
      new Promise<void>((res) => {
        if (fired || signal?.aborted) return res();
        const timer = setTimeout(done, ms);
        function done() {
          clearTimeout(timer);
          signal?.removeEventListener('abort', done);
          res();
        }
        resolve = done;
        signal?.addEventListener('abort', done, { once: true });
      });
    return { wait, disarm };
  }
}
