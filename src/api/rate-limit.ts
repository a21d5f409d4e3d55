/**
 * Token buckets in memory, per process: `ratePerSecond` refill, `burst` capacity. Bounded: the
 * least recently used keys are dropped past `maxKeys`, so random keys cannot exhaust memory
 * (a dropped key starts again with a full bucket, which only ever errs on the side of allowing).
 */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  constructor(
    readonly ratePerSecond: number,
    readonly burst: number,
    private readonly maxKeys = 10_000,
  ) {}

  /** Take one token; false when the bucket is empty. */
  take(key: string, now = Date.now()): boolean {
    let b = this.buckets.get(key);
    if (b) this.buckets.delete(key);
    else b = { tokens: this.burst, at: now };
    b.tokens = Math.min(this.burst, b.tokens + ((now - b.at) / 1000) * this.ratePerSecond);
    b.at = now;
    this.buckets.set(key, b); // re-inserted: most recently used last
    if (this.buckets.size > this.maxKeys) this.buckets.delete(this.buckets.keys().next().value!);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }
}
