/**
 * An agent's activity over time, as the dashboard draws it: per-bucket completions, failures,
 * duration percentiles, queue depth and seats in use (the series), and which run held which
 * seat when (the seat timeline). Plain functions over rows the engine read; no I/O.
 *
 * Both are bounded: a window is one of ACTIVITY_WINDOWS, cut into SERIES_BUCKETS buckets, and
 * the rows read are capped (SERIES_ROW_CAP, SEAT_ROW_CAP), newest first. When a cap cuts the
 * read, the answer says from when on it is complete (`complete_from`) instead of guessing.
 */

/** The windows the charts offer, in milliseconds. */
export const ACTIVITY_WINDOWS = Object.freeze({ '1h': 3_600_000, '6h': 21_600_000, '24h': 86_400_000 });
export type ActivityWindow = keyof typeof ACTIVITY_WINDOWS;
export const ACTIVITY_WINDOW_NAMES = Object.keys(ACTIVITY_WINDOWS) as [ActivityWindow, ...ActivityWindow[]];

/** Buckets per series: one a minute over an hour, one every 24 minutes over a day. */
export const SERIES_BUCKETS = 60;
/**
 * Finished runs one series reads row by row at most (and queued rows, separately). Each row is read,
 * copied from the reader thread and swept into its bucket, so the bound keeps a series to tens of
 * milliseconds on a loaded machine. An agent finishing more in the window still gets
 * exact counts (one counting seek per bucket, no rows returned); its durations, queue depth and
 * seats cover the newest 5,000 runs, and `complete_from` says where those start.
 */
export const SERIES_ROW_CAP = 5_000;
/** Seat intervals (and waiting rows) one timeline returns at most: more would not be legible. */
export const SEAT_ROW_CAP = 1_000;

/** One run as the activity reads it (epoch milliseconds). */
export interface ActivityRow {
  status: string;
  duration_ms: number | null;
  queued_at: number | null;
  started_at: number | null;
  completed_at: number | null;
}

export interface SeriesBucket {
  /** Bucket start, epoch ms. */
  start: number;
  succeeded: number;
  failed: number;
  /** Cancelled or skipped: finished without an outcome of their own. */
  other: number;
  /** Of the runs that succeeded or failed in the bucket; null when none did. */
  p50_ms: number | null;
  p95_ms: number | null;
  /** Most runs waiting in the queue at once during the bucket. */
  queued_max: number;
  /** Most seats in use at once during the bucket. */
  running_max: number;
}

/** Nearest-rank percentile of sorted values. */
export function percentile(sorted: readonly number[], p: number): number | null {
  if (sorted.length === 0) return null;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

interface Step {
  at: number;
  queued: number;
  running: number;
}

/**
 * The series over [from, from + SERIES_BUCKETS * bucketMs). `rows` are the runs that finished in
 * the window plus the ones queued or running at `now`. A run waits from queued_at until it
 * started (or finished without starting) and holds a seat from started_at until completed_at;
 * unfinished intervals end at `now`. Levels are swept over the sorted interval ends, so a bucket's
 * maximum counts a spike shorter than the bucket.
 */
export function bucketSeries(rows: readonly ActivityRow[], from: number, bucketMs: number, now: number): SeriesBucket[] {
  const buckets: SeriesBucket[] = [];
  const durations: number[][] = [];
  for (let i = 0; i < SERIES_BUCKETS; i++) {
    buckets.push({
      start: from + i * bucketMs,
      succeeded: 0,
      failed: 0,
      other: 0,
      p50_ms: null,
      p95_ms: null,
      queued_max: 0,
      running_max: 0,
    });
    durations.push([]);
  }
  const index = (t: number) => Math.floor((t - from) / bucketMs);
  const steps: Step[] = [];
  for (const r of rows) {
    if (r.completed_at !== null) {
      const i = index(r.completed_at);
      const b = buckets[i];
      if (b) {
        if (r.status === 'succeeded') b.succeeded++;
        else if (r.status === 'failed') b.failed++;
        else b.other++;
        if ((r.status === 'succeeded' || r.status === 'failed') && r.duration_ms !== null) durations[i]!.push(Number(r.duration_ms));
      }
    }
    const end = r.completed_at ?? now;
    if (r.queued_at !== null) {
      const waitEnd = r.started_at ?? end;
      if (waitEnd > r.queued_at) steps.push({ at: r.queued_at, queued: 1, running: 0 }, { at: waitEnd, queued: -1, running: 0 });
    }
    if (r.started_at !== null && end > r.started_at)
      steps.push({ at: r.started_at, queued: 0, running: 1 }, { at: end, queued: 0, running: -1 });
  }
  // Ends before starts at one instant: a seat handed straight on is not two at once.
  steps.sort((a, b) => a.at - b.at || a.queued + a.running - (b.queued + b.running));
  let queued = 0;
  let running = 0;
  let s = 0;
  for (; s < steps.length && steps[s]!.at <= from; s++) {
    queued += steps[s]!.queued;
    running += steps[s]!.running;
  }
  for (let i = 0; i < SERIES_BUCKETS; i++) {
    const b = buckets[i]!;
    const end = b.start + bucketMs;
    b.queued_max = queued;
    b.running_max = running;
    for (; s < steps.length && steps[s]!.at < end; s++) {
      queued += steps[s]!.queued;
      running += steps[s]!.running;
      b.queued_max = Math.max(b.queued_max, queued);
      b.running_max = Math.max(b.running_max, running);
    }
    const d = durations[i]!.sort((x, y) => x - y);
    b.p50_ms = percentile(d, 50);
    b.p95_ms = percentile(d, 95);
  }
  return buckets;
}

export interface SeatInterval {
  id: string;
  started_at: number;
  /** null: still running. */
  ended_at: number | null;
}

/**
 * Seat numbers for runs (0-based): each run takes the lowest seat free when it started, the way
 * a timeline is read. Runs are not stamped with a seat, so this numbering is drawn, not recorded;
 * what it shows truthfully is how many seats were in use at once (the highest seat + 1).
 */
export function assignSeats(intervals: readonly SeatInterval[], now: number): Map<string, number> {
  const sorted = [...intervals].sort((a, b) => a.started_at - b.started_at || (a.id < b.id ? -1 : 1));
  const freeAt: number[] = [];
  const out = new Map<string, number>();
  for (const r of sorted) {
    let seat = freeAt.findIndex((t) => t <= r.started_at);
    if (seat === -1) seat = freeAt.length;
    freeAt[seat] = r.ended_at ?? now;
    out.set(r.id, seat);
  }
  return out;
}
