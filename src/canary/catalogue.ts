import { B02, B05, B06 } from './invariants/backlog.ts';
import { C02, C03 } from './invariants/chains.ts';
import { F01, F02 } from './invariants/flow.ts';
import { C01 } from './invariants/groups.ts';
import { E02, E08, S02 } from './invariants/history.ts';
import { E01, S03 } from './invariants/lease.ts';
import { E04 } from './invariants/queue.ts';
import { E03, E07, G03 } from './invariants/rows.ts';
import { E06 } from './invariants/schedules.ts';
import { S04, S05 } from './invariants/seats.ts';
import { G04 } from './invariants/secrets.ts';
import type { ActivityInvariant, Invariant, Severity, StateInvariant, Tier } from './types.ts';

/** Every invariant the canary evaluates over its snapshot, in report order. */
export const CATALOGUE: readonly Invariant[] = Object.freeze([
  E01,
  E02,
  E03,
  E04,
  E06,
  E07,
  E08,
  S02,
  S03,
  S04,
  S05,
  B02,
  B05,
  B06,
  G03,
  G04,
  C01,
  C02,
  C03,
  F01,
  F02,
]);

export const isActivity = (i: Invariant): i is ActivityInvariant<any> => i.kind === 'activity';
export const isState = (i: Invariant): i is StateInvariant => i.kind === 'state';

/**
 * H-01 is about the canary itself, so it is not a query over the snapshot: runCanaryOnce
 * evaluates it from whether the snapshot could be read and whether it agrees with evidence
 * read outside it.
 */
export const H01 = Object.freeze({
  id: 'H-01',
  tier: 'A' as Tier,
  severity: 'critical' as Severity,
  holds: 'the canary is not blind: its snapshot read succeeded and agrees with independent evidence',
  diagnoses: {
    snapshot_failed:
      'the canary could not read its snapshot: the database is unreachable, wedged or missing tables; no other check can be trusted this cycle',
    snapshot_regressed:
      'the snapshot saw older events than were committed before it, or than an earlier cycle saw, with no pruning in between: the canary reads the wrong database/schema, or history was deleted',
    empty_snapshot_contradicted:
      'the snapshot saw no executions although the event log outside it has events: the canary reads the wrong database/schema',
  } as Record<string, string>,
});

export interface InvariantMeta {
  id: string;
  tier: Tier;
  severity: Severity;
  holds: string;
  diagnoses: Record<string, string>;
}

export const ALL_INVARIANTS: readonly InvariantMeta[] = Object.freeze([...CATALOGUE, H01]);

export function invariantMeta(id: string): InvariantMeta | undefined {
  return ALL_INVARIANTS.find((i) => i.id === id);
}

/** The one-line diagnosis for a stored violation. */
export function diagnose(invariant: string, reason: string): string {
  return invariantMeta(invariant)?.diagnoses[reason] ?? `${invariant} violated (${reason})`;
}
