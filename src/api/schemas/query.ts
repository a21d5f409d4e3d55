import { z } from 'zod';

/**
 * A whole number in a query string, within [min, max]: decimal digits only. (`z.coerce.number()`
 * took `0x10` as 16, `1e3` as 1,000 and ` 5` as 5.) Documented as an integer in /openapi.json.
 */
export const queryInt = (min: number, max: number) =>
  z.preprocess(
    (v) => (typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v),
    z
      .number({ error: 'must be a whole number in decimal digits' })
      // Digits that fail .int() are beyond a double's whole numbers: too large.
      .int({ error: `must be at most ${max}`, abort: true })
      .min(min, { error: `must be at least ${min}` })
      .max(max, { error: `must be at most ${max}` }),
  );
