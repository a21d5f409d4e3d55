/**
 * What the engine's passes and transitions report, as plain data: the shapes its events carry
 * (src/engine/events.ts) and the dispatcher, SDK and metrics read. They live here, below the
 * engine, so a module that only reads them never imports the code that produces them.
 */
import type { ExecutionErrorCode, SkipReason } from './error-codes.ts';
import type { CompletionStatus, ExecutionStatus } from './states.ts';

/** The outcome a worker (or the push dispatcher on a push agent's behalf) reports on completion. */
export interface Outcome {
  status: CompletionStatus;
  /** Any JSON value, or a RawJson: a long result already serialised (the completion route's, off the event loop). */
  result?: unknown;
  /** A worker's own code, or one of Baton's (the push dispatcher's, the completion route's default). */
  error?: { code: ExecutionErrorCode; message: string } | null;
  usage?: unknown;
}

/**
 * An outcome as the store writes it, made once by Engine.complete from the reported one: every
 * recognisable secret redacted, the result and usage serialised (JSON text, null when not given).
 */
export interface StoredOutcome {
  status: CompletionStatus;
  result: string | null;
  error: { code: ExecutionErrorCode; message: string } | null;
  usage: string | null;
}

/**
 * What the reaper did to one row. `requeued_shared`: re-queued after a shared-cause lapse (several
 * of its agent's leases lapsed at once), with the attempt given back (src/domain/admission.ts).
 */
export type ReapKind = 'requeued' | 'requeued_shared' | 'poisoned' | 'timed_out' | 'cancel_forced' | 'cancelled' | 'backlog_expired';

/** One row the reaper acted on (`reaper:reaped`). */
export interface Reaped {
  id: string;
  agent: string;
  kind: ReapKind;
  to: ExecutionStatus;
  /** The retry created with this failure, if its retry policy had attempts left. */
  retry_id?: string;
}

/** One due time a scheduler pass handled (`scheduler:fired`): a queued run or a skipped record. */
export interface Fired {
  schedule_id: string;
  agent: string;
  scheduled_for: number;
  execution_id: string;
  status: 'queued' | 'skipped';
  reason?: SkipReason;
  /** Queued for an agent that is paused: it waits until the agent is resumed. */
  agent_paused?: true;
}
