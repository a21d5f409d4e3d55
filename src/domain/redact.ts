/**
 * Secret redaction for everything Baton stores on someone else's behalf: log lines, results,
 * error codes and messages, usage, push error bodies. Recognisable key shapes (one list:
 * src/domain/secrets.ts, which the canary's G-04 reads too) are replaced before anything is
 * written, so a secret a task printed or returned never reaches the database.
 */
import { ANY_SECRET_HEAD, SECRET_PATTERNS, secretHead } from './secrets.ts';
import { RawJson } from './json.ts';
import type { Outcome, StoredOutcome } from './outcomes.ts';
import { redactUrlsIn } from './urls.ts';

/** Replace every recognisable secret in `text` with `[redacted]` (keeping its kind visible). */
export function redactSecrets(text: string): string {
  // Most text holds no secret's head: one search instead of one replace per pattern.
  if (!ANY_SECRET_HEAD.test(text)) return text;
  return untilSettled(
    text,
    SECRET_PATTERNS.map((p) => p.re),
  );
}

/**
 * Every pattern, again until nothing changes: a replacement can make the boundary a later secret
 * needs (`ASIA…gho_…`: the GitHub token follows a letter until the AWS key before it becomes
 * `ASIA[redacted]`). No pattern matches `[redacted]`, so each round leaves fewer secrets.
 */
function untilSettled(text: string, patterns: readonly RegExp[]): string {
  let out = text;
  for (let before = ''; out !== before;) {
    before = out;
    for (const re of patterns) out = out.replace(re, (m) => `${secretHead(m)}[redacted]`);
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
 * The patterns over JSON text. Inside a JSON string the character before a secret may be written
 * as an escape ending in a letter or digit (`\n`, `\u0001`), where the pattern's look-behind
 * would see that letter. The character it stands for is a boundary (JSON.stringify escapes only
 * control characters and lone surrogates, besides `"` and `\`), so here the look-behind also
 * accepts such an escape whose backslash is not itself escaped.
 */
const TEXT_PATTERNS = SECRET_PATTERNS.map(({ re }) => {
  const lookBehind = /^\(\?<!(\[[^\]]+\])\)/.exec(re.source);
  if (!lookBehind) throw new Error(`a secret pattern must start with a look-behind: ${re.source}`);
  const escapeBefore = String.raw`(?<!\\)(?:\\\\)*\\(?:[bfnrt]|u[0-9a-fA-F]{4})`;
  // One look-behind, as the pattern has: not after a character of its class, unless that character ends an escape.
  return new RegExp(`(?<!${lookBehind[1]}(?<!${escapeBefore}))${re.source.slice(lookBehind[0].length)}`, 'g');
});

/**
 * `value` as the JSON text Baton stores, every recognisable secret redacted. When no secret's
 * head appears anywhere in its text (nearly always) that text is the answer: one JSON.stringify
 * and one search. Otherwise the patterns run over the text itself (no match can leave the string
 * it starts in: none takes `"` or `\`), which parses to what redactJson gives, and costs a fraction of
 * walking a value of many keys that each hold a head.
 */
export function redactToJson(value: unknown): string {
  return redactJsonText(JSON.stringify(value));
}

/** `redactToJson` for a value already serialised as JSON.stringify writes it (RawJson's text). */
export function redactJsonText(text: string): string {
  return ANY_SECRET_HEAD.test(text) ? untilSettled(text, TEXT_PATTERNS) : text;
}

/** An outcome as stored: its result, error (URLs in its message too) and usage redacted (a result already serialised is redacted as text). */
export function redactOutcome(given: Outcome): StoredOutcome {
  return {
    status: given.status,
    result:
      given.result === undefined ? null : given.result instanceof RawJson ? redactJsonText(given.result.text) : redactToJson(given.result),
    // URLs too: a failed push names its URL, whose token-like path segments and query an
    // agent-scoped reader (or a subscriber's payload) must not see.
    error: given.error
      ? { code: given.error.code && redactSecrets(given.error.code), message: redactUrlsIn(redactSecrets(given.error.message)) }
      : null,
    usage: given.usage === undefined ? null : redactToJson(given.usage),
  };
}
