/**
 * Bounds of the batch submit (`POST /v1/agents/{agent}/executions/batch`, Engine.submitMany) and
 * the one pattern an idempotency key must match, whether it comes in the Idempotency-Key header
 * or on a batch item.
 */

export const BATCH = Object.freeze({
  /**
   * Most items in one batch. Every item is created in one transaction that holds the agent's
   * new-work turn, so the bound keeps that turn short (1,000 rows: a few milliseconds on either
   * store) and the per-item answer small enough to read at once.
   */
  maxItems: 1000,
  /** Largest batch body: 1,000 small tasks fit many times over; large payloads go one by one. */
  bodyLimitBytes: 8 * 1024 * 1024,
});

/** An idempotency key: 1-255 visible ASCII characters. */
export const IDEMPOTENCY_KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

/**
 * Bounds of a completion (`POST /v1/executions/{id}/complete`) and of the batch of them
 * (`POST /v1/completions`). A batch's items are what its single route takes, each within the
 * single route's bound; the batch bounds the count, so its answer stays small and its items'
 * statements fit the store's gathered calls.
 */
export const COMPLETION = Object.freeze({
  /** Largest body of one completion (its result, mostly). */
  bodyLimitBytes: 4 * 1024 * 1024,
  /** Most completions in one batch. */
  batchMaxItems: 100,
  /** Largest batch body: many small results; a large one goes alone. */
  batchBodyLimitBytes: 8 * 1024 * 1024,
});

/** One claim for several agents (POST /v1/claim). */
export const CLAIM_ANY = Object.freeze({
  /** Most agents one claim lists: a worker process serving more sends several claims. */
  maxAgents: 1000,
  /** Most tasks one agent's item asks for (as a single claim's `max`). */
  maxPerAgent: 100,
});
