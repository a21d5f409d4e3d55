/**
 * Page cursors: opaque to callers (base64url), the last item's sort key inside. A cursor this API
 * did not make is a 400 naming `querystring.cursor`, never a 500 or a silently wrong page.
 */
import { BatonError } from '../domain/errors.ts';
import { TEXT_CHARS } from './schemas/text.ts';

const notOurs = () => new BatonError('validation_error', 'querystring.cursor: not a cursor returned by this API');

/** Newest-first and oldest-first lists keyed by (created_at, id): executions, groups, subscriptions. */
export const encodeTimeCursor = (r: { created_at: number; id: string }) => Buffer.from(`${r.created_at}:${r.id}`).toString('base64url');
export function decodeTimeCursor(cursor: string): { created_at: number; id: string } {
  const m = /^(\d{1,15}):([A-Za-z0-9_-]+)$/.exec(Buffer.from(cursor, 'base64url').toString());
  if (!m) throw notOurs();
  return { created_at: Number(m[1]), id: m[2]! };
}

/** Lists keyed by names (schedules: agent, name; webhooks: agent, name, id): a JSON array of `arity` strings. */
export const encodeNameCursor = (key: readonly string[]) => Buffer.from(JSON.stringify(key)).toString('base64url');
export function decodeNameCursor(cursor: string, arity: number): string[] {
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(cursor, 'base64url').toString());
  } catch {
    throw notOurs();
  }
  // (Text as stored: a NUL or a lone surrogate is in no key, and PostgreSQL refuses a NUL in a parameter.)
  if (!Array.isArray(v) || v.length !== arity || !v.every((x) => typeof x === 'string' && TEXT_CHARS.test(x))) throw notOurs();
  return v as string[];
}
