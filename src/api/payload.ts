import { DEFAULTS } from '../config.ts';
import { BatonError } from '../domain/errors.ts';

/**
 * A body's payload as the JSON text to store, serialised once here (the engine stores this text
 * rather than serialising the value again): undefined when the body has none, 413
 * payload_too_large naming `field` past the limit.
 */
export function payloadText(payload: unknown, field: string): string | undefined {
  if (payload === undefined) return undefined;
  const text = JSON.stringify(payload);
  if (Buffer.byteLength(text) > DEFAULTS.payloadLimitBytes) {
    throw new BatonError('payload_too_large', `${field}: larger than ${DEFAULTS.payloadLimitBytes} bytes serialised`);
  }
  return text;
}
