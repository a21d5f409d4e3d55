import type { AlertSinkKind } from '../domain/canary.ts';
import type { DeliveryMode } from '../domain/delivery.ts';
import type { SecretBox } from '../domain/secret-box.ts';
import type { StoreAdapter } from '../store/adapter.ts';

/** What an Engine is built with, and what a claim asks for (engine.ts). */

/** The terms used here (agent, execution, seat, lease, hold, …) are defined in docs/concepts.md#glossary. */
export interface EngineOptions {
  store: StoreAdapter;
  /** Milliseconds since the epoch. Tests inject a clock they can move. Default the store's clock (StoreAdapter.now: the database's on PostgreSQL). */
  clock?: () => number;
  /** Names this process in lease owners and event actors. */
  nodeId?: string;
  cancelGraceMs?: number;
  backlogExpiryMs?: number;
  claimPollMs?: number;
  /** Rows one reaper pass handles per transaction. Default 100. */
  reapBatch?: number;
  /**
   * Encrypts push signing secrets at rest. `baton up` passes lazySecretBox(dataDir) from
   * src/delivery/secrets.ts; without one, storing or reading a push secret throws.
   */
  secrets?: SecretBox;
  /**
   * Alert sinks configured (kinds only; the URLs stay with the canary, which delivers): a circuit
   * breaker change queues one canary_alerts row per kind in its transaction. Default none.
   */
  alertSinks?: readonly AlertSinkKind[];
  /** Longest chain of subscriptions a task may sit at the end of; further links are refused and recorded. Default 10. */
  chainDepthLimit?: number;
}

export interface ClaimOptions {
  owner: string;
  /** Most tasks to return. Default 1. */
  max?: number;
  /** `pull` (default): a worker; `push`: Baton's own dispatcher. The agent's delivery must match. */
  delivery?: DeliveryMode;
  /** Long-poll: how long to wait for work when none is admissible. Default 0. */
  waitMs?: number;
  signal?: AbortSignal;
  /** The API key the claim is made with: it takes no task once that key is revoked (src/engine/claim-key.ts). */
  keyId?: string;
}
