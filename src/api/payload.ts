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
 * `JSON.stringify(value)` of a body that may hold RawJson (what an idempotency fingerprint
 * hashes): each in place as its text, so a body reads the same whether it came large or small.
 */
export function bodyText(value: unknown): string {
  const splice = new JsonSplice();
  return splice.stringify(value, (_key, v: unknown) => (v instanceof RawJson ? splice.raw(v.text) : v));
}
