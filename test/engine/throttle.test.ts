import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { afterStart, emissionMs, nextStartAt, throttleAdmits, throttleProblem, type Throttle } from '../../src/domain/throttle.ts';

const throttles = fc.record({
  limit: fc.integer({ min: 1, max: 50 }),
  period_seconds: fc.integer({ min: 1, max: 120 }),
  burst: fc.integer({ min: 0, max: 10 }),
});

/** Start whenever the throttle allows, at the times given (sorted), as admission does. */
function run(t: Throttle, tries: number[]): number[] {
  let tat: number | null = null;
  const starts: number[] = [];
  for (const now of tries) {
    if (!throttleAdmits(t, tat, now)) continue;
    tat = afterStart(t, tat, now);
    starts.push(now);
  }
  return starts;
}

describe('throttle (GCRA)', () => {
  it('never starts more than limit + burst in any window of one period', () => {
    fc.assert(
      fc.property(throttles, fc.array(fc.integer({ min: 0, max: 600_000 }), { maxLength: 400 }), (t, raw) => {
        const starts = run(
          t,
          [...raw].sort((a, b) => a - b),
        );
        const period = t.period_seconds * 1000;
        for (let i = 0, j = 0; i < starts.length; i++) {
          while (starts[j]! < starts[i]! - period + 1) j++;
          expect(i - j + 1).toBeLessThanOrEqual(t.limit + t.burst);
        }
      }),
    );
  });

  it('admits burst + 1 at once after a quiet spell, then one per emission interval', () => {
    const t = { limit: 10, period_seconds: 60, burst: 2 };
    expect(run(t, [0, 0, 0, 0, 0])).toHaveLength(3);
    let tat: number | null = null;
    for (let i = 0; i < 3; i++) tat = afterStart(t, tat, 0);
    expect(nextStartAt(t, tat, 0)).toBe(emissionMs(t));
    expect(throttleAdmits(t, tat, emissionMs(t) - 1)).toBe(false);
    expect(throttleAdmits(t, tat, emissionMs(t))).toBe(true);
  });

  it('names the field that is wrong', () => {
    expect(throttleProblem({ limit: 0, period_seconds: 60, burst: 0 })).toMatch(/^limit/);
    expect(throttleProblem({ limit: 1, period_seconds: 0, burst: 0 })).toMatch(/^period_seconds/);
    expect(throttleProblem({ limit: 1, period_seconds: 1, burst: -1 })).toMatch(/^burst/);
    expect(throttleProblem({ limit: 1, period_seconds: 1, burst: 0 })).toBeNull();
  });
});
