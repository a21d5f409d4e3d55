import { randomBytes } from 'node:crypto';

/** 128 bits of randomness, URL-safe (22 characters). Used for execution ids and lease tokens. */
export function newId(prefix = ''): string {
  return prefix + randomBytes(16).toString('base64url');
}

export const newExecutionId = () => newId('ex_');
export const newLeaseToken = () => newId('ls_');
