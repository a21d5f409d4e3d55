import { createHash } from 'node:crypto';

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
  const digest = createHash('sha256').update(`baton-trace:${executionId}`).digest();
  // An all-zero id is invalid in W3C trace context; a hash gives one with odds 2^-64, but it costs nothing to rule out.
  if (digest.subarray(0, 16).every((b) => b === 0)) digest[15] = 1;
  if (digest.subarray(16, 24).every((b) => b === 0)) digest[23] = 1;
  const traceId = digest.toString('hex', 0, 16);
  const spanId = digest.toString('hex', 16, 24);
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

/** The trace and parent span of a `traceparent` header, or undefined when it is not a valid version-00 value. */
export function parseTraceparent(header: string | undefined): { traceId: string; spanId: string; sampled: boolean } | undefined {
  const m = header && /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(header.trim());
  if (!m || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return undefined;
  return { traceId: m[1]!, spanId: m[2]!, sampled: (parseInt(m[3]!, 16) & 1) === 1 };
}
