import type pg from 'pg';

/**
 * Between two measurements of the offset to the database's clock. The offset is measured against
 * a monotonic base, so a step of this machine's wall clock (NTP, an operator) changes nothing in
 * between; what is left is the two oscillators' drift (parts per million), which a minute keeps
 * far below a millisecond.
 */
export const CLOCK_SYNC_INTERVAL_MS = 60_000;

/** Round trips per measurement; the shortest one bounds the error best (its half is the bound). */
const SAMPLES = 3;

/**
 * The wall clock and the base moving apart by more than this means one of them jumped: a step of
 * the wall clock, or a suspended machine (the monotonic clock stands still meanwhile). Either way
 * the offset is measured again at once rather than at the next interval.
 */
const JUMP_MS = 1_000;

/**
 * This process's time by the PostgreSQL server's clock, without a round trip per reading: the
 * process clock plus an offset measured as NTP does (SELECT clock_timestamp() against the
 * midpoint of the round trip; of a few, the shortest) when the store opens, every
 * CLOCK_SYNC_INTERVAL_MS, and at once after a jump (JUMP_MS). Every process on one database then stamps and compares times on one
 * clock, whatever its own wall clock says; the error is at most half the shortest round trip.
 */
export class DatabaseClock {
  private offsetMs = 0;
  /** Half the round trip of the sample the offset came from: how far off the offset can be. */
  private errorMs = Infinity;
  private synced: Promise<void> | undefined;
  private timer: ReturnType<typeof setInterval> | undefined;
  private stopped = false;
  /** Date.now() minus the base at the last measurement (a jump shows as a change of it). */
  private wallMinusBase: number | undefined;
  private measuring: Promise<void> | undefined;

  constructor(
    private readonly pool: pg.Pool,
    /**
     * The process clock the offset is added to. Default: the monotonic clock anchored at the
     * process's start (performance.timeOrigin + performance.now()), which no wall-clock step moves.
     */
    private readonly base: () => number = () => performance.timeOrigin + performance.now(),
  ) {}

  /**
   * Milliseconds since the epoch by the database's clock. Until the first measurement (which
   * `migrate()` waits for, so a server never serves before it) the process clock, and a reading
   * starts that measurement.
   */
  now(): number {
    const base = this.base();
    if (!this.stopped) {
      if (!this.synced) this.ready().catch(() => undefined);
      else if (this.wallMinusBase !== undefined && Math.abs(Date.now() - base - this.wallMinusBase) > JUMP_MS) {
        this.wallMinusBase = undefined; // one measurement per jump
        this.measure().catch(() => undefined);
      }
    }
    return Math.round(base + this.offsetMs);
  }

  /** What the last measurement found: the database's clock minus this process's, and its error bound. */
  skew(): { offsetMs: number; errorMs: number } {
    return { offsetMs: this.offsetMs, errorMs: this.errorMs };
  }

  /** The first measurement (shared by every caller until it settles), then one every CLOCK_SYNC_INTERVAL_MS. */
  ready(): Promise<void> {
    if (!this.synced) {
      this.synced = this.measure().catch(async (err) => {
        // The next caller tries again, a second on: readings during an outage do not each send a query.
        setTimeout(() => (this.synced = undefined), 1_000).unref();
        throw err;
      });
      this.timer ??= setInterval(() => void this.measure().catch(() => undefined), CLOCK_SYNC_INTERVAL_MS);
      this.timer.unref();
    }
    return this.synced;
  }

  /** Measure the offset again now (joining a measurement under way). */
  measure(): Promise<void> {
    this.measuring ??= this.sample().finally(() => (this.measuring = undefined));
    return this.measuring;
  }

  private async sample(): Promise<void> {
    let best: { offset: number; half: number } | undefined;
    for (let i = 0; i < SAMPLES; i++) {
      const before = this.base();
      const { rows } = await this.pool.query<{ ms: string }>('SELECT (extract(epoch from clock_timestamp()) * 1000)::float8 AS ms');
      const after = this.base();
      const half = (after - before) / 2;
      const offset = Number(rows[0]!.ms) - (before + half);
      if (!best || half < best.half) best = { offset, half };
    }
    this.offsetMs = best!.offset;
    this.errorMs = best!.half;
    this.wallMinusBase = Date.now() - this.base();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
