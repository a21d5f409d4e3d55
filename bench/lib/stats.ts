/** Small statistics helpers for the benchmark. All inputs in milliseconds. */

/** Nearest-rank percentile (p in 0..100) of an unsorted sample. */
export function percentile(sample: number[], p: number): number {
  if (sample.length === 0) return NaN;
  const sorted = [...sample].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1]!;
}

export interface LatencySummary {
  n: number;
  mean: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  min: number;
}

export function summarize(sample: number[]): LatencySummary {
  const n = sample.length;
  const mean = n ? sample.reduce((a, b) => a + b, 0) / n : NaN;
  return {
    n,
    mean: round(mean, 3),
    p50: round(percentile(sample, 50), 3),
    p95: round(percentile(sample, 95), 3),
    p99: round(percentile(sample, 99), 3),
    max: round(n ? Math.max(...sample) : NaN, 3),
    min: round(n ? Math.min(...sample) : NaN, 3),
  };
}

export function round(x: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
