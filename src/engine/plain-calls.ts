import type { ClaimRequest, CompletionRequest, FastPaths, SubmitRequest, Submitted } from '../store/fast-paths.ts';
import type { StoreAdapter } from '../store/adapter.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { Admissions, atSend } from './admissions.ts';
import { emptyLooksOn, type EmptyLooks } from './empty-looks.ts';
import { Gathered } from './gather.ts';
import type { ClaimWaits, TakenClaim } from './waiters.ts';

/**
 * A plain submit's answer. `after`: call it once the submit's row is announced; a claim its call
 * admitted that row to gets its answer then, so every listener hears `queued` before `running`.
 */
export interface PlainSubmitted extends Submitted {
  after?: () => void;
}

/** The engine's gathered fast-path calls (store.fastPaths; gather.ts). */
export interface PlainCalls {
  submits: Gathered<SubmitRequest, PlainSubmitted>;
  completions: Gathered<CompletionRequest, ExecutionRow | undefined>;
  /** Claims, many agents to a call; each answers with its rows, or undefined: admit in a transaction. */
  claims: Gathered<ClaimRequest, ExecutionRow[] | undefined>;
  /** Admissions the claims' call left undecided, many agents to a transaction (admissions.ts). */
  admissions: Admissions;
  /** Where the store has it, the read of agents a claim's look would find nothing for (empty-looks.ts). */
  emptyLooks: EmptyLooks | undefined;
}

/** The gathered calls on `fast`; submits take the claims parked in `waits` on their agents. */
export function plainCalls(store: StoreAdapter, fast: FastPaths, waits: ClaimWaits, now: () => number): PlainCalls {
  // A submit the call refused is made alone, which says why.
  const submitOne = (i: SubmitRequest) => fast.submitOne(i);
  return {
    submits: new Gathered<SubmitRequest, PlainSubmitted>({
      many: (items) => submitsWithClaims(fast, waits, now, items, () => fast.submitGathered(items)),
      one: async (i) =>
        (await submitsWithClaims(fast, waits, now, [i], async () => new Map([[i.id, await submitOne(i)]]))).get(i.id) ?? submitOne(i),
      absent: submitOne,
    }),
    completions: new Gathered({
      many: (items) => fast.completeMany(items),
      one: async (i) => (await fast.completeMany([i])).get(i.id),
      // Not completed alone: its transaction does what it causes, or explains the refusal.
      absent: async () => undefined,
    }),
    claims: new Gathered({
      many: (items) => fast.claimMany(items.map((i) => atSend(i, now))),
      one: async (i) => (await fast.claimMany([atSend(i, now)])).get(i.id),
      // Not decided by the call (a hold may apply, a serial key, an unknown agent): its transaction decides.
      absent: async () => undefined,
    }),
    admissions: new Admissions(store, now),
    emptyLooks: emptyLooksOn(store, now),
  };
}

/**
 * Plain submits with, for each of their agents, one claim parked on it in this process, in one call
 * and one commit (FastPaths.submitClaim): the claim that the submit's announcement would wake is
 * admitted in the submit's own commit instead of a round trip and a commit of its own after it.
 * Without a parked claim, `plain` (the call without claims). If the shared call fails, the submits
 * are made by `plain` and then each taken claim looks itself: a claim never fails a submit.
 */
async function submitsWithClaims(
  fast: FastPaths,
  waits: ClaimWaits,
  now: () => number,
  items: readonly SubmitRequest[],
  plain: () => Promise<Map<string, Submitted>>,
): Promise<Map<string, PlainSubmitted>> {
  const taken = new Map<string, TakenClaim>();
  for (const i of items) {
    if (taken.has(i.f.agent)) continue;
    const claim = waits.takeParked(i.f.agent);
    if (claim) taken.set(i.f.agent, claim);
  }
  if (taken.size === 0) return plain();
  let out: Awaited<ReturnType<FastPaths['submitClaim']>>;
  try {
    const at = now();
    out = await fast.submitClaim(
      items,
      [...taken].map(([agent, c]) => Object.assign({}, c.request, { id: agent, now: at })),
    );
  } catch {
    // Each taken claim looks itself once the submits are made, so its look can find them.
    try {
      return await plain();
    } finally {
      for (const c of taken.values()) c.settle(undefined);
    }
  }
  const submitted = out.submitted as Map<string, PlainSubmitted>;
  for (const [agent, claim] of taken) handOver(waits, claim, out.claimed.get(agent), submitted);
  return submitted;
}

/**
 * Give a taken claim its rows. Those that are submits of this call are answered only after each
 * such submit's announcement (its `after`), which then wakes no other claimer here for it.
 */
function handOver(waits: ClaimWaits, claim: TakenClaim, rows: ExecutionRow[] | undefined, submitted: Map<string, PlainSubmitted>): void {
  const ours = (rows ?? []).map((r) => submitted.get(r.id)).filter((s) => s !== undefined);
  if (ours.length === 0) return claim.settle(rows);
  let pending = ours.length;
  for (const s of ours) {
    waits.served(s.row.id);
    const before = s.after;
    s.after = () => {
      before?.();
      if (--pending === 0) claim.settle(rows);
    };
  }
}
