/**
 * What a finished task reports, decided from plain facts: how its handler settled, why its
 * signal fired (if it did), whether its lease was lost. No requests here: the worker (sdk.ts)
 * gathers the facts once the handler is done, asks `decideReport`, and sends what comes back;
 * test/worker/worker-outcome.test.ts walks every case.
 */
import type { AbortReason } from '../domain/lease.ts';
import { redactSecrets } from '../domain/redact.ts';

export interface Usage {
  input_tokens?: number;
  output_tokens?: number;
  total_tokens?: number;
  cost_usd?: number;
  [k: string]: unknown;
}

export interface TaskOutcome {
  status: 'succeeded' | 'failed' | 'cancelled';
  result?: unknown;
  error?: { code?: string; message: string };
  usage?: Usage;
}

const OUTCOME = Symbol.for('baton.outcome');
/** Return `outcome({...})` from a handler to choose the status, error or usage explicitly. */
export function outcome(o: TaskOutcome): TaskOutcome {
  return Object.assign(Object.create({ [OUTCOME]: true }), o);
}
const isOutcome = (v: unknown): v is TaskOutcome => typeof v === 'object' && v !== null && (v as any)[OUTCOME] === true;

/** How the handler ended: it returned a value or threw. */
export type Settled = { ok: true; value: unknown } | { ok: false; error: unknown };

export interface TaskEnd {
  /** Undefined: the handler had not returned when the worker stopped waiting for it. */
  settled: Settled | undefined;
  /** Why the task's signal fired, if it did. */
  reason: AbortReason | undefined;
  /** A heartbeat or a log request answered lease_lost. */
  leaseLost: boolean;
  /** The task's deadline as the server sent it (quoted in the timeout message). */
  deadlineAt: string;
}

export type Report =
  /** Another worker may own the task now: say nothing. */
  | { kind: 'lost' }
  /** The worker is stopping: hand the task back to the queue. */
  | { kind: 'release' }
  | { kind: 'complete'; outcome: TaskOutcome };

/**
 * A lost lease reports nothing and a shutdown releases; otherwise the task completes. Cancel
 * and deadline decide the status whatever the handler said (its message, result and usage are
 * kept); else the handler's own word counts, and a handler that never returned failed.
 */
export function decideReport(end: TaskEnd): Report {
  if (end.leaseLost || end.reason === 'lease_lost') return { kind: 'lost' };
  if (end.reason === 'shutdown') return { kind: 'release' };
  const given = handlerOutcome(end.settled);
  const detail = given?.error?.message ? `; ${given.error.message}` : '';
  let out: TaskOutcome;
  if (end.reason === 'cancelled') {
    out = {
      status: 'cancelled',
      result: given?.result,
      error: { code: 'cancel_requested', message: `cancelled on request${detail}` },
      usage: given?.usage,
    };
  } else if (end.reason === 'deadline') {
    out = {
      status: 'failed',
      result: given?.result,
      error: { code: 'timeout', message: `timed out: the deadline ${end.deadlineAt} passed (agent timeout)${detail}` },
      usage: given?.usage,
    };
  } else {
    out = given ?? { status: 'failed', error: { code: 'handler_error', message: 'the handler did not return' } };
  }
  return { kind: 'complete', outcome: cleanError(out) };
}

/** What the handler said: its `outcome({...})`, a value (succeeded), or a throw (failed). */
function handlerOutcome(settled: Settled | undefined): TaskOutcome | undefined {
  if (settled === undefined) return undefined;
  if (settled.ok) return isOutcome(settled.value) ? settled.value : { status: 'succeeded', result: settled.value };
  const err = settled.error as any;
  const code = err?.code && typeof err.code === 'string' ? err.code : 'handler_error';
  return { status: 'failed', error: { code, message: (err as Error)?.message || String(err) || 'the handler failed without a message' } };
}

/** A failure always carries an error, and an error only text the server accepts (a copy: the handler's object is left alone). */
function cleanError(o: TaskOutcome): TaskOutcome {
  const error = o.status === 'failed' && !o.error ? { code: 'failed', message: 'the handler reported failure without a message' } : o.error;
  if (!error) return o;
  return {
    ...o,
    error: {
      code: error.code ? cleanMessage(error.code).slice(0, 100) : undefined,
      message: cleanMessage(error.message || 'failed without a message'),
    },
  };
}

/**
 * The server refused the outcome itself (400: a result too large, usage that is not numbers…;
 * 413): report that as the failure rather than leave the task to lapse and run again. Other
 * answers are not a verdict on the outcome (undefined).
 */
export function refusedOutcome(status: number, message: string): TaskOutcome | undefined {
  if (status !== 400 && status !== 413) return undefined;
  return {
    status: 'failed',
    error: { code: 'invalid_outcome', message: cleanMessage(`the server refused the handler's outcome: ${message}`) },
  };
}

/** Text the server accepts in an error message: no NUL, at most 10,000 characters. */
function cleanMessage(s: string): string {
  const t = redactSecrets(s.replace(/\u0000/g, '\uFFFD'));
  return t.length > 9_000 ? t.slice(0, 9_000) + '… [cut]' : t;
}
