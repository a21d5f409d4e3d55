import type { ClaimAnyItem, Widening } from '../engine/claim-any.ts';
import type { Engine } from '../engine/engine.ts';

/** A claim parked here: `end` ends its wait (a withdrawal); `widening` adds agents to it (a widening). */
export interface Parked {
  end: AbortController;
  widening: Widening;
}

/**
 * The claims on several agents (POST /v1/claim) waiting in this process that named a `claim_id`,
 * by key and id, and their withdrawal (POST /v1/claim/withdraw) from any process of the store.
 *
 * Behind a balancer, a withdrawal may reach another `baton up` than the one its claim waits in.
 * One that finds no such claim here is passed on over the store's signals (`claim`: LISTEN/NOTIFY
 * on PostgreSQL; in memory on SQLite, one process), and every process ends the wait of a claim
 * of that key and id that waits in it, as a withdrawal made there would. The key travels with
 * the id: a withdrawal reaches only its own key's claims, wherever they wait. The message comes
 * back to this process too: a claim that arrived here after its withdrawal was looked up (the
 * withdrawal overtook it) is ended by it.
 *
 * A widening (POST /v1/claim/widen) adds agents to a claim waiting in this process only: it is not
 * passed on, and says whether it took, so a worker whose widening did not take withdraws the claim
 * instead (src/worker/claim-loop.ts), which reaches every process.
 */
export class ParkedClaims {
  private readonly parked = new Map<string, Parked>();
  private readonly off: () => void;

  constructor(private readonly engine: Engine) {
    this.off = engine.subscribe('claim', (message) => void this.parked.get(message)?.end.abort());
  }

  /** The name a claim is parked under, and the message that withdraws it: no tab or newline in either part. */
  static nameOf(keyId: string, claimId: string): string {
    return `${encodeURIComponent(keyId)}\t${encodeURIComponent(claimId)}`;
  }

  /** A claim named `name` waits here until `leave`; its `end` aborts when it is withdrawn. */
  park(name: string, claim: Parked): void {
    this.parked.set(name, claim);
  }

  leave(name: string, claim: Parked): void {
    if (this.parked.get(name) === claim) this.parked.delete(name);
  }

  /** Add `items` to the claim named `name`: true when it waits here and took them (Widening). */
  widen(name: string, items: readonly ClaimAnyItem[]): boolean {
    return this.parked.get(name)?.widening.add?.(items) ?? false;
  }

  /** End the wait of the claim named `name`: true when it waits here; else the other processes are told. */
  withdraw(name: string): boolean {
    const claim = this.parked.get(name);
    if (claim) {
      claim.end.abort();
      return true;
    }
    this.engine.publish('claim', name);
    return false;
  }

  close(): void {
    this.off();
  }
}
