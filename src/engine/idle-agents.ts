/**
 * Agents a look just found with no queued row, so that a claim on many agents (claim-any.ts)
 * need not look at each of them again when it starts: a worker serving 100 agents re-claims after
 * every answer, and most of its agents have nothing queued most of the time.
 *
 * A mark holds while no signal has said work may have been queued for the agent since the look
 * began (ClaimWaits counts them: `changed`, from the announcement of every status change into
 * `queued`, here or in another process, and from every agent change), and for at most `ttlMs`:
 * what no signal announces (one lost while LISTEN reconnected) is found within that time, as the
 * poll finds it for a claim that waits.
 */
export class IdleAgents {
  /** Per agent, a count of the signals that it may have queued work. */
  private readonly changes = new Map<string, number>();
  /** Agents whose look found no queued row: the change count before that look, and when it ended. */
  private readonly marks = new Map<string, { seen: number; at: number }>();

  constructor(private readonly ttlMs: number) {}

  /** Work may have been queued for `agent`, or the agent changed: a look at it can no longer be skipped. */
  changed(agent: string): void {
    if (this.changes.size >= 10_000) {
      this.changes.clear();
      this.marks.clear();
    }
    this.changes.set(agent, (this.changes.get(agent) ?? 0) + 1);
    this.marks.delete(agent);
  }

  /** The change count of `agent`, read before a look at it (mark takes it). */
  seen(agent: string): number {
    return this.changes.get(agent) ?? 0;
  }

  /** A look that began at change count `seen` found no queued row of `agent`. */
  mark(agent: string, seen: number): void {
    if (this.seen(agent) === seen) this.marks.set(agent, { seen, at: performance.now() });
  }

  /** Whether a look at `agent` would find no queued row (see the class). */
  known(agent: string): boolean {
    const m = this.marks.get(agent);
    return m !== undefined && m.seen === this.seen(agent) && performance.now() - m.at < this.ttlMs;
  }
}
