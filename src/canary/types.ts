import type { StoreKind, Tx } from '../store/adapter.ts';
import type { CanaryTiming } from './graces.ts';

/** A: must hold at every instant. B: must hold within the stated grace. */
export type Tier = 'A' | 'B';
export type Severity = 'critical' | 'warning';

/** One broken instance of an invariant. Ids, reason codes and numbers only. */
export interface Finding {
  /** What it is about: an execution id, an agent, a schedule id, or 'canary'. */
  subject: string;
  agent?: string | null;
  /** Reason code: one of the invariant's `diagnoses` keys. */
  reason: string;
  detail?: Record<string, string | number | null>;
}

export interface CheckContext {
  /** This check's own clock reading, taken just before its population is read. */
  now: number;
  /** This check's grace in ms (0 for tier A). */
  graceMs: number;
  timing: CanaryTiming;
  kind: StoreKind;
  /** Say something about a partial check (e.g. a table that does not exist yet). */
  note(text: string): void;
}

/** A check that cannot run on this database yet (e.g. its table comes with a later migration). */
export interface Skip {
  skip: string;
}

export interface Invariant<Row = any> {
  id: string;
  tier: Tier;
  severity: Severity;
  /** One line: what holds when all is well. */
  holds: string;
  /** reason code → one-line diagnosis naming the component at fault. */
  diagnoses: Record<string, string>;
  grace(t: CanaryTiming): number;
  /** The rows that may break the invariant, read inside the cycle's snapshot. */
  population(tx: Tx, ctx: CheckContext): Promise<Row[] | Skip>;
  /** Pure: which of those rows break it, and why. */
  evaluate(rows: Row[], ctx: CheckContext): Finding[];
}

export interface CheckResult {
  id: string;
  status: 'ok' | 'violated' | 'skipped';
  skipped_reason?: string;
  /** Parts of the check that could not run, and why. */
  notes?: string[];
  findings: Finding[];
  /** More findings existed than are kept; open rows of this invariant are not resolved this cycle. */
  truncated: boolean;
  checked_at: number;
}

/** At most this many findings per invariant per cycle are stored (the rest are counted). */
export const MAX_FINDINGS = 500;

export const isSkip = (x: unknown): x is Skip => typeof x === 'object' && x !== null && 'skip' in x && !Array.isArray(x);
