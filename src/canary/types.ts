/**
 * The canary's terms (state and activity invariants, checkpoint, recheck, full check) are defined
 * in docs/concepts.md#glossary.
 */
import type { CheckStatus, Severity, Tier } from '../domain/canary.ts';
import type { StoreKind, Tx } from '../store/adapter.ts';
import type { CanaryTiming } from './graces.ts';

export type { Severity, Tier };

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
  /** The store read: a read may ask for its index's order (src/engine/candidates.ts inIndexOrder). */
  kind: StoreKind;
  /** Say something about a partial check. */
  note(text: string): void;
  /** A state invariant's open subjects, judged again each cycle by one that reads its population in slices. */
  open?: ReadonlySet<string>;
  /**
   * Where a state invariant that reads its population in slices stopped last cycle, kept by the
   * canary's process (absent in a full check, which reads the whole population).
   */
  slices?: SliceCursor;
  /** The rows of the executions the cycle judges, read once for every activity invariant that judges them (src/canary/touched.ts). */
  touched?: SharedRows;
}

/**
 * What the invariants that judge an execution by its row (E-03, E-07, G-03, G-04, C-01, C-02,
 * C-03) read of it. `suspect`: a client-supplied column holds a secret pattern's prefix (G-04
 * reads those columns for such rows only).
 */
export interface Touched {
  id: string;
  agent: string;
  status: string;
  queued_at: number | null;
  started_at: number | null;
  completed_at: number | null;
  duration_ms: number | null;
  retry_of: string | null;
  group_id: string | null;
  caused_by: string | null;
  suspect: boolean;
}

/** The rows of the executions in a scope, read once in a snapshot (src/canary/touched.ts TouchedRows). */
export interface SharedRows {
  read(tx: Tx, scope: RowScope): Promise<Touched[]>;
}

/** A state invariant's place in its population between cycles, and how many rows a slice holds. */
export interface SliceCursor {
  rows: number;
  get(): unknown;
  set(place: unknown): void;
}

interface InvariantMeta {
  id: string;
  tier: Tier;
  severity: Severity;
  /** One line: what holds when all is well. */
  holds: string;
  /** reason code → one-line diagnosis naming the component at fault. */
  diagnoses: Record<string, string>;
  grace(t: CanaryTiming): number;
}

/** Judged over the current non-terminal rows each cycle. */
export interface StateInvariant<Row = any> extends InvariantMeta {
  kind: 'state';
  /** The rows that may break the invariant, read inside the cycle's snapshot. */
  population(tx: Tx, ctx: CheckContext): Promise<Row[]>;
  /** Pure: which of those rows break it, and why. */
  evaluate(rows: Row[], ctx: CheckContext): Finding[];
}

/** One row of execution_events as the canary reads it. */
export interface EventRow {
  id: number;
  execution_id: string;
  agent: string;
  from_status: string | null;
  to_status: string;
  at: number;
  seats_in_use: number | null;
  seat_cap: number | null;
  /** The task's concurrency key (null: none). */
  flow_key: string | null;
}

/** The executions a row check looks at: these ids, or (full check) a keyset range of ids. */
export type RowScope = { ids: readonly string[] } | { after: string | null; through: string };

/** An open violation, as an activity invariant re-checks it. */
export interface OpenViolation {
  subject: string;
  agent: string | null;
  reason: string;
  detail: Record<string, string | number | null> | null;
}

/** What an activity invariant carries from one cycle to the next (S-02: seats in use). */
export interface CarriedState<S> {
  initial(): S;
  load(json: string): S;
  save(state: S): string;
  /** Drop what can no longer be true, before replaying (S-02: seats of pruned executions). */
  prune?(tx: Tx, state: S): Promise<void>;
}

/**
 * Judged over activity: the events since its checkpoint and the executions they touched, plus a
 * recheck of its open violations. Either part is optional.
 */
export interface ActivityInvariant<S = unknown> extends InvariantMeta {
  kind: 'activity';
  /**
   * Pure, over one chunk of events in id order: findings from the events alone, and which
   * executions to judge on their rows (default: every execution the chunk touched).
   */
  events?(chunk: readonly EventRow[], state: S, ctx: CheckContext): { findings: Finding[]; judge?: Iterable<string> };
  /** The executions in `scope`, as they are now. */
  rows?(tx: Tx, scope: RowScope, ctx: CheckContext): Promise<Finding[]>;
  /** Judge the subjects of open violations again (default: `rows` over their ids). */
  recheck?(tx: Tx, open: readonly OpenViolation[], ctx: CheckContext): Promise<Finding[]>;
  /**
   * Judged every cycle (and in a full check) over live subjects, beside the activity, like a
   * state invariant: its population is work in flight (C-01: the running groups), never history.
   */
  live?(tx: Tx, ctx: CheckContext): Promise<Finding[]>;
  /** A full check walks every execution through `rows` (else only those `events` names). */
  fullWalksRows?: boolean;
  state?: CarriedState<S>;
}

export type Invariant = StateInvariant | ActivityInvariant<any>;

export interface CheckResult {
  id: string;
  status: CheckStatus;
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

/**
 * One check's findings as they come, in bounded memory: one per subject (the first reason wins),
 * subjects not already open first, so a check with more findings than it keeps still opens new
 * ones; at most MAX_FINDINGS kept. It holds at most MAX_FINDINGS new subjects and the open ones
 * it met, however many findings a full check over a broken history adds. `cutNew`: subjects not
 * open yet were cut (an activity invariant then keeps its checkpoint).
 */
export class Findings {
  private readonly fresh: Finding[] = [];
  private readonly freshSubjects = new Set<string>();
  private freshCut = false;
  private readonly reopened: Finding[] = [];
  private readonly reopenedSubjects = new Set<string>();

  constructor(private readonly open: ReadonlySet<string>) {}

  add(findings: Iterable<Finding>): void {
    for (const f of findings) {
      if (this.open.has(f.subject)) {
        if (this.reopenedSubjects.has(f.subject)) continue;
        this.reopenedSubjects.add(f.subject);
        if (this.reopened.length < MAX_FINDINGS) this.reopened.push(f);
      } else if (!this.freshCut && !this.freshSubjects.has(f.subject)) {
        if (this.fresh.length === MAX_FINDINGS) this.freshCut = true;
        else {
          this.freshSubjects.add(f.subject);
          this.fresh.push(f);
        }
      }
    }
  }

  result(): { findings: Finding[]; truncated: boolean; cutNew: boolean } {
    return {
      findings: [...this.fresh, ...this.reopened].slice(0, MAX_FINDINGS),
      truncated: this.freshCut || this.fresh.length + this.reopenedSubjects.size > MAX_FINDINGS,
      cutNew: this.freshCut,
    };
  }
}

/** Executions per IN list (well under SQLite's and PostgreSQL's bound-parameter limits). */
export const IDS_PER_QUERY = 500;

export function idChunks<T>(xs: readonly T[], size = IDS_PER_QUERY): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += size) out.push(xs.slice(i, i + size));
  return out;
}

/** Give the event loop a turn: between chunks, so no single step holds it long. */
export const yieldToLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Ids in one generation of a RecentlySeen (why this bound: RecentlySeen). */
export const SEEN_GENERATION = 20_000;

/**
 * The subjects a cycle has judged, to judge each once: the last one or two generations of at most
 * SEEN_GENERATION ids each. A Set that only grows would hold every execution in a full check
 * over all history, and a Set rehashes on the event loop as it doubles: one add at a million ids
 * holds the event loop far past the 50 ms a step may take. One judged before the older generation was dropped is judged again, which
 * costs a read and changes nothing (findings are kept one per subject). A normal cycle reads at
 * most EVENTS_PER_CYCLE events, so it never drops a generation.
 */
export class RecentlySeen {
  private older = new Set<string>();
  private newer = new Set<string>();

  has(id: string): boolean {
    return this.newer.has(id) || this.older.has(id);
  }

  add(id: string): void {
    this.newer.add(id);
    if (this.newer.size < SEEN_GENERATION) return;
    this.older = this.newer;
    this.newer = new Set();
  }

  /** The ids of `ids` not seen lately (each once), now marked seen. */
  fresh(ids: Iterable<string>): string[] {
    const out: string[] = [];
    for (const id of ids) {
      if (this.has(id)) continue;
      this.add(id);
      out.push(id);
    }
    return out;
  }
}
