import { randomBytes } from 'node:crypto';

/** Random bytes drawn 4 KiB at a time: one system call per 256 ids instead of one each. */
const POOL_BYTES = 4096;
let pool = randomBytes(POOL_BYTES);
let offset = 0;

function take(bytes: number): string {
  if (offset + bytes > POOL_BYTES) {
    pool = randomBytes(POOL_BYTES);
    offset = 0;
  }
  const s = pool.toString('base64url', offset, offset + bytes);
  offset += bytes;
  return s;
}

/** 128 bits of randomness, URL-safe (22 characters). Used for lease tokens and most ids. */
export function newId(prefix = ''): string {
  return prefix + take(16);
}

/** base32hex digits: their byte order is their numeric order, and so is their order in any collation. */
const TIME_DIGITS = '0123456789abcdefghijklmnopqrstuv';

/**
 * An execution id: `ex_`, the creation time in milliseconds as 10 base32hex digits, then 72 random
 * bits (12 URL-safe characters) — 22 characters after the prefix, like every other id. Ids made
 * close in time sort close together, so each index keyed by an execution id (the primary key,
 * events, logs, idempotency keys) takes new rows at its right edge and old rows sit together at
 * its left, where the pruner removes them a few pages at a time instead of one page per row.
 * Nothing reads meaning from the order: ties within a millisecond are random, and `created_at`
 * stays the time of record.
 */
export function newExecutionId(at = Date.now()): string {
  let t = Math.max(0, Math.floor(at));
  let time = '';
  for (let i = 0; i < 10; i++) {
    time = TIME_DIGITS[t % 32]! + time;
    t = Math.floor(t / 32);
  }
  return 'ex_' + time + take(9);
}

export const newLeaseToken = () => newId('ls_');
