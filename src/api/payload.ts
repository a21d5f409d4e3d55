import { DEFAULTS } from '../config.ts';
import { BatonError } from '../domain/errors.ts';
import { RawJson } from '../domain/json.ts';
import { JsonSplice } from '../domain/json-splice.ts';

/**
 * A body's payload as the JSON text to store, serialised once here (the engine stores this text
 * rather than serialising the value again): undefined when the body has none, 413
 * payload_too_large naming `field` past the limit.
 */
export function payloadText(payload: unknown, field: string): string | undefined {
  if (payload === undefined) return undefined;
  // A payload of a large batch or group was serialised on the JSON thread (src/api/json-off-thread.ts).
  const text = payload instanceof RawJson ? payload.text : JSON.stringify(payload);
  if (Buffer.byteLength(text) > DEFAULTS.payloadLimitBytes) {
    throw new BatonError('payload_too_large', `${field}: larger than ${DEFAULTS.payloadLimitBytes} bytes serialised`);
  }
  return text;
}

/**
 * `JSON.stringify(body)` of a body that may hold RawJson at `paths` (the route's rawJsonPaths),
 * each in place as its text: what an idempotency fingerprint hashes, the same whether the body came
 * large or small. Only the way down to those paths is copied; nothing else is walked.
 */
export function bodyText(body: unknown, paths: readonly string[]): string {
  const splice = new JsonSplice();
  const swap = (v: unknown, path: readonly string[]): unknown => {
    if (path.length === 0) return v instanceof RawJson ? splice.raw(v.text) : v;
    const [head, ...rest] = path;
    if (head === '*') return Array.isArray(v) ? v.map((x) => swap(x, rest)) : v;
    if (v === null || typeof v !== 'object' || Array.isArray(v) || !Object.hasOwn(v, head!)) return v;
    // Spread keeps the key where it was: the text reads as the body was sent.
    return { ...(v as Record<string, unknown>), [head!]: swap((v as Record<string, unknown>)[head!], rest) };
  };
  return splice.stringify(paths.reduce((v, p) => swap(v, p.split('.')), body));
}
