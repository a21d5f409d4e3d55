/**
 * One agent's share of a worker (src/worker/sdk.ts): its slots, the tasks running in them and
 * the claims in flight for it. A worker serving several agents keeps one lane per agent, so each
 * agent's concurrency is counted on its own while the HTTP client and its connections are shared.
 */
import type { AbortReason } from '../domain/lease.ts';

export interface Running {
  abort(reason: AbortReason): void;
  finished: Promise<void>;
}

export class Lane {
  readonly running = new Map<string, Running>();
  /**
   * Slots promised to claims in flight (the claim loop's, and those sent with completions) and
   * running tasks whose slot a completion handed to its claim: free() counts neither, so the
   * tasks running and the tasks that may still arrive never exceed the concurrency.
   */
  outstanding = 0;
  handedOver = 0;
  /** The claim loop's claim in flight asks for this agent (a long-poll, most of the time). */
  claiming = false;
  /** Told when a slot frees (the claim loop: claim-loop.ts). */
  onFree: (() => void) | undefined;

  constructor(
    readonly agent: string,
    readonly concurrency: number,
  ) {}

  /** Slots neither running a task nor promised to a claim in flight. */
  free(): number {
    return this.concurrency - (this.running.size - this.handedOver) - this.outstanding;
  }

  /** A task left its slot (handedOver: a completion's claim had taken the slot over). */
  finish(id: string, handedOver: boolean): void {
    this.running.delete(id);
    if (handedOver) this.handedOver--;
    this.onFree?.();
  }
}
