import type { ExecutionRow } from '../store/schema.ts';
import { completeAlone, completeAloneMany, type LoneCompletion } from './transitions/complete.ts';
import type { Executor } from './transitions/stamp.ts';

/** Most completions one statement carries. */
export const LONE_BATCH_MAX = 100;

interface Waiting extends LoneCompletion {
  resolve: (row: ExecutionRow | undefined) => void;
  reject: (err: unknown) => void;
}

/**
 * Completions that cause nothing else (completeAlone), on PostgreSQL, gathered: those asked for
 * in one turn of the event loop, and those asked for while a call is out, go to the database as
 * one call (completeAloneMany: the function baton_complete_many), one round trip and one commit
 * instead of one each. Each caller still gets its own answer: its row, or undefined when the
 * one-call path does not apply or refused it (the caller then completes in a transaction, which
 * explains a refusal), exactly as completeAlone answers.
 *
 * One call is out at a time per engine, so this process's calls never wait on each other's row
 * locks. If a call fails (a lost connection, a value the database refuses), each completion is
 * tried again alone, so one cause of failure reaches only the callers it concerns. The same
 * execution twice waits for the next call.
 */
export class LoneCompletions {
  private queue: Waiting[] = [];
  private scheduled = false;
  private running = false;

  constructor(private readonly db: Executor) {}

  complete(item: LoneCompletion): Promise<ExecutionRow | undefined> {
    if (item.outcome.status === 'failed') return Promise.resolve(undefined);
    return new Promise((resolve, reject) => {
      this.queue.push({ ...item, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.running || this.queue.length === 0) return;
    this.scheduled = true;
    // After this turn's I/O callbacks: every completion they asked for rides the same statement.
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    this.running = true;
    const batch: Waiting[] = [];
    const ids = new Set<string>();
    const rest: Waiting[] = [];
    for (const w of this.queue) {
      if (batch.length < LONE_BATCH_MAX && !ids.has(w.id)) {
        ids.add(w.id);
        batch.push(w);
      } else rest.push(w);
    }
    this.queue = rest;
    try {
      if (batch.length === 1) await this.alone(batch[0]!);
      else {
        let done: Map<string, ExecutionRow> | undefined;
        try {
          done = await completeAloneMany(this.db, batch);
        } catch {
          // Nothing of the batch was written: each on its own, with its own answer or error.
          await Promise.all(batch.map((w) => this.alone(w)));
        }
        if (done) for (const w of batch) w.resolve(done.get(w.id));
      }
    } finally {
      this.running = false;
      this.schedule();
    }
  }

  private async alone(w: Waiting): Promise<void> {
    try {
      w.resolve(await completeAlone(this.db, w.id, w.token, w.outcome, w.now, w.actor));
    } catch (err) {
      w.reject(err);
    }
  }
}
