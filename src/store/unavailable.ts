/**
 * Is this error the database being away (restarting, unreachable, out of connections, unable to
 * write) rather than a fault in the request or in Baton? Such errors are weather: the API answers
 * 503 `unavailable` with Retry-After, and workers and dispatchers wait and retry. One table per
 * store, here, so every edge classifies alike.
 */

/**
 * PostgreSQL SQLSTATEs: class 08 (connection exception), 57P01–57P03 (admin shutdown, crash
 * shutdown, cannot connect now — a restart), 53xxx (insufficient resources: too many
 * connections, disk full, out of memory), 25006 (read-only transaction: a standby after failover).
 */
const PG_UNAVAILABLE = /^(08...|57P0[123]|53...|25006)$/;

/** Node socket errors while reaching PostgreSQL. */
const NET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);

/** node-postgres reports a lost or failed connection with these messages and no code. */
const PG_CONNECTION_MESSAGES =
  /Connection terminated|connection error|not queryable|timeout exceeded when trying to connect|Connection ended/i;

/**
 * SQLite result codes (better-sqlite3 `code`): the file is locked past busy_timeout, or the disk
 * refuses the write (full, I/O error, read-only file system, cannot open).
 */
const SQLITE_UNAVAILABLE = /^SQLITE_(BUSY|LOCKED|FULL|IOERR|READONLY|CANTOPEN)(_|$)/;

export function isStoreUnavailable(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown; errors?: unknown } | null | undefined;
  if (!e || typeof e !== 'object') return false;
  const code = typeof e.code === 'string' ? e.code : '';
  if (PG_UNAVAILABLE.test(code) || NET_CODES.has(code) || SQLITE_UNAVAILABLE.test(code)) return true;
  if (!code && typeof e.message === 'string' && PG_CONNECTION_MESSAGES.test(e.message)) return true;
  // An AggregateError from a dual-stack connect (every address refused).
  if (Array.isArray(e.errors)) return e.errors.some(isStoreUnavailable);
  return false;
}

/**
 * Is this error the store refusing a write for lack of disk space: SQLITE_FULL, or PostgreSQL's
 * 53100 disk_full (a data file could not be extended)? A kind of unavailable: nothing was
 * written, and the same write succeeds once space returns.
 */
export function isStoreFull(err: unknown): boolean {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return code === '53100' || (typeof code === 'string' && /^SQLITE_FULL(_|$)/.test(code));
}

/** What a client is told to wait before retrying, in seconds. */
export const UNAVAILABLE_RETRY_AFTER_S = 2;
