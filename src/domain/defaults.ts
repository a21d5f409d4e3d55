/**
 * The defaults the wire contract documents (an agent's settings, the claim wait, the payload
 * limit). They live in the domain, not in src/config.ts, so the schemas — and with them the SDK
 * package an agent installs — never load the server's settings module. config.ts's DEFAULTS
 * spreads this object, so the server and the contract cannot disagree.
 */
export const CONTRACT_DEFAULTS = Object.freeze({
  /** Agent seats when none are given: one task at a time is the safe default for an agent box. */
  maxParallel: 1,
  maxBacklog: 100,
  timeoutSeconds: 900,
  /**
   * Lease TTL. Shorter detects a dead worker sooner but lets a GC pause or a slow network look
   * like death (and causes a re-delivery); 30 s with heartbeats every TTL/3 tolerates ~20 s stalls.
   */
  leaseTtlSeconds: 30,
  /** Re-deliveries after the first attempt before a task is parked as `poisoned`. */
  maxRedeliveries: 3,
  /** Long-poll claim wait when the worker does not say. Below common 30 s proxy idle timeouts. */
  claimWaitMs: 25_000,
  claimWaitMaxMs: 60_000,
  /** Task payload limit (serialised JSON). */
  payloadLimitBytes: 256 * 1024,
  /**
   * A claim stops taking tasks once those it took carry this many bytes of message and payload
   * (it always takes one when it can): an answer of 100 tasks at the payload limit is 25 MiB, and
   * reading and writing it holds the server's event loop for its size, far past the 50 ms a step
   * may take. The worker claims again for the rest.
   */
  claimAnswerBytes: 2 * 1024 * 1024,
});
