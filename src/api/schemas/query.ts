import { z } from 'zod';

/**
 * A whole number in a query string, within [min, max]: decimal digits only. (`z.coerce.number()`
 * took `0x10` as 16, `1e3` as 1,000 and ` 5` as 5.) Documented as an integer in /openapi.json.
 */
export const queryInt = (min: number, max: number) =>
  z.preprocess(
    (v) => (typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v),
    z.number({ error: 'must be a whole number in decimal digits' }).int().min(min).max(max),
  );
