/**
 * Secret redaction for everything Baton stores on someone else's behalf: log lines, results,
 * error codes and messages, usage, push error bodies. Recognisable key shapes (one list:
 * src/domain/secrets.ts, which the canary's G-04 reads too) are replaced before anything is
 * written, so a secret a task printed or returned never reaches the database.
 */
import { ANY_SECRET_HEAD, SECRET_PATTERNS, secretHead } from './secrets.ts';

/** Replace every recognisable secret in `text` with `[redacted]` (keeping its kind visible). */
export function redactSecrets(text: string): string {
  // Most text holds no secret's head: one search instead of one replace per pattern.
  if (!ANY_SECRET_HEAD.test(text)) return text;
  let out = text;
  for (const { re } of SECRET_PATTERNS) {
    if (out.length === 0) break;
    out = out.replace(re, (m) => `${secretHead(m)}[redacted]`);
  }
  return out;
}

/**
 * `redactSecrets` over every string in a JSON value (keys included); other values unchanged.
 * Callers pass values whose nesting was bounded at the edge (src/domain/json.ts).
 */
export function redactJson<T>(value: T): T {
  if (typeof value === 'string') return redactSecrets(value) as T;
  if (Array.isArray(value)) return value.map((v) => redactJson(v)) as T;
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [redactSecrets(k), redactJson(v)])) as T;
  }
  return value;
}

/**
 * `value` as the JSON text Baton stores, every recognisable secret redacted. When no secret's
 * head appears anywhere in its text (nearly always) that text is the answer: one JSON.stringify
 * and one search, where walking a result of 100,000 keys would hold the event loop for tens of
 * milliseconds. Otherwise redactJson walks it, then it is serialised.
 */
export function redactToJson(value: unknown): string {
  const text = JSON.stringify(value);
  return ANY_SECRET_HEAD.test(text) ? JSON.stringify(redactJson(value)) : text;
}
