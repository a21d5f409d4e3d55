import { randomBytes } from 'node:crypto';

/** Random bytes drawn 4 KiB at a time: one system call per 256 ids instead of one each. */
const POOL_BYTES = 4096;
let pool = randomBytes(POOL_BYTES);
let offset = 0;

/** 128 bits of randomness, URL-safe (22 characters). Used for execution ids and lease tokens. */
export function newId(prefix = ''): string {
  if (offset + 16 > POOL_BYTES) {
    pool = randomBytes(POOL_BYTES);
    offset = 0;
  }
  const id = prefix + pool.toString('base64url', offset, offset + 16);
  offset += 16;
  return id;
}

export const newExecutionId = () => newId('ex_');
export const newLeaseToken = () => newId('ls_');
