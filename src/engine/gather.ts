/** Most calls one database call carries. */
export const GATHER_MAX = 100;

interface Waiting<I, O> {
  item: I;
  resolve: (out: O) => void;
  reject: (err: unknown) => void;
}

/** How a kind of call is made for many items at once, and for one. */
export interface GatherOptions<I, O> {
  /** All of them in one database call: the answer of each item it settled, by id. */
  many: (items: I[]) => Promise<Map<string, O>>;
  /** One item alone: for a call of one, and for every item of a call that failed. */
  one: (item: I) => Promise<O>;
  /** The answer of an item the call left out of its map. */
  absent: (item: I) => Promise<O>;
}

/**
 * Calls to the database that can go together, gathered (the store's fast paths: StoreAdapter.fastPaths):
 * those asked for in one turn of the event loop, and those asked for while a call is out, go as one
 * call — one round trip and one commit instead of one each. Used for plain submits
 * (fastPaths.submitGathered), completions that cause nothing else (completeMany) and claims
 * (claimMany, one per agent: the id is the agent's name), and the admissions claimMany leaves undecided (admissions.ts: a transaction, not a call). Each caller still gets its own answer, the one it would get alone: an
 * item the call left out gets `absent` (a refused submit is made alone, which says why; a
 * completion, or a claim the call could not decide, goes to its transaction), and if the call
 * fails each item is made alone, so one cause of failure reaches only the callers it concerns.
 *
 * One call is out at a time per kind per engine, so this process's calls never wait on each
 * other's row locks (admissions: one per lane; lanes may wait on each other, in lock order). The
 * same id twice waits for the next call.
 */
export class Gathered<I extends { id: string }, O> {
  private queue: Array<Waiting<I, O>> = [];
  private scheduled = false;
  private running = false;

  constructor(private readonly o: GatherOptions<I, O>) {}

  /** Whether a call of these is out now (what is asked for meanwhile waits for the next one). */
  get out(): boolean {
    return this.running;
  }

  run(item: I): Promise<O> {
    return new Promise((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.running || this.queue.length === 0) return;
    this.scheduled = true;
    // After this turn's I/O callbacks: every call they asked for rides the same one.
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    this.running = true;
    const batch: Array<Waiting<I, O>> = [];
    const ids = new Set<string>();
    const rest: Array<Waiting<I, O>> = [];
    for (const w of this.queue) {
      if (batch.length < GATHER_MAX && !ids.has(w.item.id)) {
        ids.add(w.item.id);
        batch.push(w);
      } else rest.push(w);
    }
    this.queue = rest;
    try {
      if (batch.length === 1) await this.settle(batch[0]!, this.o.one);
      else {
        let done: Map<string, O> | undefined;
        try {
          done = await this.o.many(batch.map((w) => w.item));
        } catch {
          // Nothing of the call was written: each on its own, with its own answer or error.
          await Promise.all(batch.map((w) => this.settle(w, this.o.one)));
        }
        if (done) {
          const answered = done;
          for (const w of batch) if (answered.has(w.item.id)) w.resolve(answered.get(w.item.id)!);
          await Promise.all(batch.filter((w) => !answered.has(w.item.id)).map((w) => this.settle(w, this.o.absent)));
        }
      }
    } finally {
      this.running = false;
      this.schedule();
    }
  }

  private async settle(w: Waiting<I, O>, how: (item: I) => Promise<O>): Promise<void> {
    try {
      w.resolve(await how(w.item));
    } catch (err) {
      w.reject(err);
    }
  }
}
