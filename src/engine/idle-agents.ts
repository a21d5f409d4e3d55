import { setRecent } from './bounded.ts';

/** Agents remembered (their last change, their mark): beyond it the one changed or marked longest ago goes. */
const BOUND = 10_000;

/**
 * Agents a look just found with no queued row, so that a claim on many agents (claim-any.ts)
 * need not look at each of them again when it starts: a worker serving 100 agents re-claims after
 * every answer, and most of its agents have nothing queued most of the time.
 *
 * A mark holds while no signal has said work may have been queued for the agent since the look
 * began (ClaimWaits reports them: `changed`, from the announcement of every status change into
 * `queued`, here or in another process, and from every agent change), and for at most `ttlMs`:
 * what no signal announces (one lost while LISTEN reconnected) is found within that time, as the
 * poll finds it for a claim that waits.
 *
 * Changes are stamped from one counter that only grows, and an agent's `seen` is its last stamp.
 * An agent forgotten at the bound reads as the newest stamp forgotten (`floor`), which is at least
 * its own last one: so an agent's `seen` never goes back, and every change raises it. A look's
 * `seen` equal to the agent's now therefore means no change since, whatever was forgotten between
 * (a forgotten agent may only lose a mark it could have had).
 */
export class IdleAgents {
  private counter = 0;
  /** The newest stamp dropped at the bound: the `seen` of every agent not in `changes`. */
  private floor = 0;
  /** Per agent, the stamp of its last change, oldest first (stamps grow, and a change re-inserts). */
  private readonly changes = new Map<string, number>();
  /** Agents whose look found no queued row: their `seen` before that look, and when it ended. */
  private readonly marks = new Map<string, { seen: number; at: number }>();
  /** Agents a look here has answered for (looked), whatever it found. */
  private readonly answered = new Map<string, true>();

  constructor(private readonly ttlMs: number) {}

  /** Work may have been queued for `agent`, or the agent changed: a look at it can no longer be skipped. */
  changed(agent: string): void {
    this.marks.delete(agent);
    // At the bound the oldest entry goes; `changes` is in stamp order, so its stamp is the newest forgotten.
    if (this.changes.size >= BOUND && !this.changes.has(agent)) this.floor = this.changes.values().next().value!;
    setRecent(this.changes, agent, ++this.counter, BOUND);
  }

  /** The stamp of `agent`'s last change, read before a look at it (mark takes it). */
  seen(agent: string): number {
    return this.changes.get(agent) ?? this.floor;
  }

  /** A look that began at `seen` found no queued row of `agent`. */
  mark(agent: string, seen: number): void {
    if (this.seen(agent) === seen) setRecent(this.marks, agent, { seen, at: performance.now() }, BOUND);
  }

  /**
   * A look here answered for `agent` (it took rows, found none, or read that it had none): its
   * claim then says when it leaves no queued row (a mark), so a later look need not read first
   * whether the agent has any (claim-any.ts dropEmpty).
   */
  looked(agent: string): void {
    if (!this.answered.has(agent)) setRecent(this.answered, agent, true, BOUND);
  }

  /** Whether a look here has answered for `agent` (looked), among the last BOUND agents. */
  seenBefore(agent: string): boolean {
    return this.answered.has(agent);
  }

  /** Whether a look at `agent` would find no queued row (see the class). */
  known(agent: string): boolean {
    const m = this.marks.get(agent);
    return m !== undefined && m.seen === this.seen(agent) && performance.now() - m.at < this.ttlMs;
  }
}
