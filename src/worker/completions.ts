/**
 * The worker's completions, gathered: those that become ready in the same turn of the event loop
 * go to the server as one request (POST /v1/completions). Tasks claimed together tend to finish
 * together (a claim answered by a submit's commit starts them at once), and each request costs
 * the server its HTTP work whatever it carries.
 *
 * A completion given to `complete` settles exactly as BatonClient.complete would: with the single
 * route's answer, or with the ApiError the single route would have thrown (the batch answers each
 * item as that route does), so the worker's retries, refused-outcome fallback and lease_lost
 * handling (src/worker/sdk.ts) see no difference. A batch of one goes to the single route. A
 * batch the server refuses as a whole with a final answer (a server without the route answers
 * 404; a body over its limit 413) is sent again one completion at a time, so no item is judged
 * by another's fault; a transport error or a 5xx fails every item of it, and each is retried on
 * its own schedule.
 */
import { ApiError, type BatonClient, type Completed, type CompletionItem } from '../client.ts';
import { COMPLETION } from '../domain/batch.ts';
import { isTransient } from './retry.ts';

/**
 * Batches out at once. While they are, the completions that become ready wait for the next flush
 * (a batch answered): under load they gather into larger batches instead of more requests.
 */
const IN_FLIGHT = 4;

interface Pending {
  item: CompletionItem;
  resolve(answer: Completed): void;
  reject(err: unknown): void;
}

export class CompletionBatcher {
  private queue: Pending[] = [];
  private scheduled = false;
  private inFlight = 0;
  /** Cleared when the server has no batch route: every completion then goes alone. */
  private batchRoute = true;

  constructor(private readonly client: BatonClient) {}

  /** Report one outcome; settles as BatonClient.complete(id, body) would. Its claim, if any, does not wait. */
  complete(id: string, body: Omit<CompletionItem, 'execution_id'>): Promise<Completed> {
    return new Promise((resolve, reject) => {
      this.queue.push({ item: { execution_id: id, ...body }, resolve, reject });
      this.schedule();
    });
  }

  /** Flush once this turn's completions are in (setImmediate runs after the turn's I/O callbacks). */
  private schedule(): void {
    if (this.scheduled || this.inFlight >= IN_FLIGHT) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    while (this.queue.length > 0 && this.inFlight < IN_FLIGHT) {
      const batch = this.queue.splice(0, COMPLETION.batchMaxItems);
      this.inFlight++;
      void this.send(batch).finally(() => {
        this.inFlight--;
        if (this.queue.length > 0) this.schedule();
      });
    }
  }

  private async send(batch: Pending[]): Promise<void> {
    if (batch.length === 1 || !this.batchRoute) {
      await Promise.all(batch.map((p) => this.sendAlone(p)));
      return;
    }
    let answers;
    try {
      answers = await this.client.completeMany(batch.map((p) => p.item));
    } catch (err) {
      if (isTransient(err) || !(err instanceof ApiError)) {
        for (const p of batch) p.reject(err);
        return;
      }
      if (err.status === 404) this.batchRoute = false;
      await Promise.all(batch.map((p) => this.sendAlone(p)));
      return;
    }
    for (const a of answers) {
      const p = batch[a.index]!;
      if ('error' in a) p.reject(new ApiError(a.http_status, a.error, a.message, a));
      else p.resolve(a.completed);
    }
  }

  private async sendAlone(p: Pending): Promise<void> {
    const { execution_id, ...body } = p.item;
    try {
      p.resolve(await this.client.complete(execution_id, body));
    } catch (err) {
      p.reject(err);
    }
  }
}
