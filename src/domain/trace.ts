import * as crypto from 'node:crypto';

/**
 * SHA-256 of a string as hex. Node's one-shot `crypto.hash` (20.12 and later) is several times
 * faster than a Hash object for a short input, and this runs for every execution a view shows.
 */
const oneShot = (crypto as { hash?: (algorithm: string, data: string) => string }).hash;
const sha256Hex = oneShot
  ? (data: string) => oneShot('sha256', data)
  : (data: string) => crypto.createHash('sha256').update(data).digest('hex');

/**
 * An execution's W3C trace context, derived from its id alone: the trace id is the first 16
 * bytes of SHA-256("baton-trace:" + id), the span id of its root span the next 8. Every process
 * (the one that queued it, the one that admitted it, the one that completed it, the worker and
 * the push endpoint) computes the same ids without storing or passing anything, so their spans
 * land in one trace. Tracing on or off, the ids are the same (docs/operations.md, "OpenTelemetry").
 */
export interface ExecutionTrace {
  /** 32 lower-case hex characters. */
  traceId: string;
  /** 16 lower-case hex characters: the execution's root span. */
  spanId: string;
  /** `00-<trace id>-<span id>-01`: the header value, and TRACEPARENT for a command. */
  traceparent: string;
}

export function executionTrace(executionId: string): ExecutionTrace {
  const hex = sha256Hex(`baton-trace:${executionId}`);
  // An all-zero id is invalid in W3C trace context; a hash gives one with odds 2^-64, but it costs
  // nothing to rule out: the id's last byte becomes 01.
  const traceId = nonZero(hex.slice(0, 32));
  const spanId = nonZero(hex.slice(32, 48));
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

const nonZero = (id: string) => (/^0+$/.test(id) ? `${id.slice(0, -2)}01` : id);

/** The trace and parent span of a `traceparent` header, or undefined when it is not a valid version-00 value. */
export function parseTraceparent(header: string | undefined): { traceId: string; spanId: string; sampled: boolean } | undefined {
  const m = header && /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(header.trim());
  if (!m || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return undefined;
  return { traceId: m[1]!, spanId: m[2]!, sampled: (parseInt(m[3]!, 16) & 1) === 1 };
}
