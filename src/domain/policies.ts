/**
 * A schedule's or webhook's answer when a run of it is still in flight: `skip` the new one
 * (a skipped row records why), `queue` it behind the running one, or `allow` both to run.
 */
export const OVERLAP_POLICIES = Object.freeze(['skip', 'queue', 'allow'] as const);
export type OverlapPolicy = (typeof OVERLAP_POLICIES)[number];

/** A schedule's answer to ticks missed while no process ran: one catch-up run within the grace (`run_once`), or none (`skip`). */
export const MISFIRE_POLICIES = Object.freeze(['run_once', 'skip'] as const);
export type MisfirePolicy = (typeof MISFIRE_POLICIES)[number];
