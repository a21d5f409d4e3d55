import { describe, expect, it } from 'vitest';
import { isoTime } from '../../src/domain/iso-time.ts';

/** What isoTime must equal for every value: Date's own text, or Date's own error. */
const expected = (ms: number) => {
  try {
    return new Date(ms).toISOString();
  } catch (err) {
    return (err as Error).constructor.name;
  }
};
const actual = (ms: number) => {
  try {
    return isoTime(ms);
  } catch (err) {
    return (err as Error).constructor.name;
  }
};

describe('isoTime', () => {
  it('formats every instant as Date.prototype.toISOString does, whatever the day formatted before', () => {
    const day = 86_400_000;
    const now = Date.UTC(2026, 11, 7, 21, 12, 3, 45);
    const values = [
      now,
      now + 1,
      now - (now % day),
      now - (now % day) - 1,
      now - (now % day) + day - 1,
      now - (now % day) + day,
      0,
      -0,
      -1,
      -day,
      -day - 1,
      1.5,
      -1.5,
      now + 0.999,
      Date.UTC(9999, 11, 31, 23, 59, 59, 999),
      Date.UTC(10000, 0, 1),
      Date.UTC(0, 0, 1) - 1,
      8.64e15,
      8.64e15 + 1,
      8.64e15 - 1,
      -8.64e15,
      -8.64e15 - 1,
      Number.NaN,
      Number.POSITIVE_INFINITY,
    ];
    // Each value after each other (the day kept from the one before), then random ones near and far.
    for (const a of values) {
      for (const b of values) {
        expect(actual(a)).toBe(expected(a));
        expect(actual(b)).toBe(expected(b));
      }
    }
    let seed = 7;
    const rand = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
    for (let i = 0; i < 20_000; i++) {
      const ms = i % 2 ? now + Math.floor((rand() - 0.5) * 3 * day) : Math.floor((rand() - 0.5) * 2 * 8.64e15);
      expect(actual(ms)).toBe(expected(ms));
    }
  });
});
