import type { Kysely } from 'kysely';
import { statusIs } from '../status-sql.ts';
import type { DB } from '../../store/schema.ts';

/**
 * Every status write sets these three columns. A database trigger (see the migrations) copies
 * them, with the old and new status, into `execution_events` in the same statement, so a
 * transition cannot forget its event.
 */
export function stamp(now: number, actor: string, reason: string | null = null) {
  return { changed_at: now, changed_by: actor, change_reason: reason };
}

/** A single guarded statement needs no explicit transaction: it runs on whatever it is given. */
export type Executor = Kysely<DB>;

/** Queued and running, written into the SQL text (see status-sql.ts). */
export const QUEUED = statusIs('queued');
export const RUNNING = statusIs('running');
