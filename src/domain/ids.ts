import { randomBytes } from 'node:crypto';

/** Random bytes drawn 4 KiB at a time: one system call per 256 ids instead of one each. */
const POOL_BYTES = 4096;
let pool = randomBytes(POOL_BYTES);
let offset = 0;

/** Reserves `bytes` random bytes of the pool; returns where they start. */
function reserve(bytes: number): number {
  if (offset + bytes > POOL_BYTES) {
    pool = randomBytes(POOL_BYTES);
    offset = 0;
  }
  offset += bytes;
  return offset - bytes;
}

function take(bytes: number): string {
  const at = reserve(bytes);
  return pool.toString('base64url', at, at + bytes);
}

/** 128 bits of randomness, URL-safe (22 characters). Used for lease tokens and most ids. */
export function newId(prefix = ''): string {
  return prefix + take(16);
}

/** base32hex digits: their byte order is their numeric order, and so is their order in any collation. */
const TIME_DIGITS = '0123456789abcdefghijklmnopqrstuv';

/** `n` (a non-negative integer below 32^width) as `width` base32hex digits. */
function base32hex(n: number, width: number): string {
  let out = '';
  for (let i = 0; i < width; i++) {
    out = TIME_DIGITS[n % 32]! + out;
    n = Math.floor(n / 32);
  }
  return out;
}

/** 2^30: each half of an execution id's 60-bit tail is 6 base32hex digits. */
const HALF = 2 ** 30;
let lastMs = -1;
let tailHigh = 0;
let tailLow = 0;

/**
 * An execution id: `ex_`, the creation time in milliseconds as 10 base32hex digits, then a 60-bit
 * tail as 12 base32hex digits — 22 characters after the prefix, like every other id. Ids made
 * close in time sort close together, so each index keyed by an execution id (the primary key,
 * events, logs, idempotency keys) takes new rows at its right edge and old rows sit together at
 * its left, where the pruner removes them a few pages at a time instead of one page per row.
 *
 * The tail is random at the first id of each millisecond and counts up from there for the
 * following ones, as ULID's monotonic mode does: within one process, ids sort in the order they
 * were made (unless the clock steps back), so rows created in the same millisecond (a batch submit's items, which share their
 * `queued_at`) keep that order where admission breaks ties by id. Across processes, ties within a
 * millisecond are random. Nothing reads meaning from the id; `created_at` is the time of record.
 */
export function newExecutionId(at = Date.now()): string {
  const t = Math.max(0, Math.floor(at));
  if (t === lastMs) {
    // The same millisecond as the last id: count on from it.
    tailLow++;
    if (tailLow === HALF) {
      tailLow = 0;
      tailHigh++;
    }
  } else {
    lastMs = t;
    // Random start in the lower half of the range: 2^59 more ids fit before the tail could wrap.
    const r = reserve(8);
    tailHigh = pool.readUInt32BE(r) % (HALF / 2);
    tailLow = pool.readUInt32BE(r + 4) % HALF;
  }
  return 'ex_' + base32hex(t, 10) + base32hex(tailHigh, 6) + base32hex(tailLow, 6);
}

export const newLeaseToken = () => newId('ls_');
