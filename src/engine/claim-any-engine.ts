import type { ExecutionRow } from '../store/schema.ts';
import { reportTo, waitAny, type AdmitAgent, type ClaimAnyItem, type Widening } from './claim-any.ts';
import type { ClaimOptions } from './engine-options.ts';
import type { EmptyLooks } from './empty-looks.ts';
import type { AdmitOptions } from './transitions/admit.ts';
import type { ClaimWaits } from './waiters.ts';

/** What a claim on several agents takes from the engine (engine.claimAny). */
export interface ClaimAnyEngine {
  waits: ClaimWaits;
  /** One admission for an agent, announced (the single claim's: engine.admitOnce). */
  admitOnce(agent: string, opts: AdmitOptions): Promise<ExecutionRow[]>;
  /**
   * Rows a submit admitted for the claim in its own call, to announce; present only where submits
   * take parked claims (the plain calls: plain-calls.ts).
   */
  admitted: ((rows: ExecutionRow[]) => void) | undefined;
  /** Rows leased to a caller that left: back to the queue, their attempt given back. */
  giveBack(rows: readonly ExecutionRow[], owner: string): Promise<void>;
  /** Where the store has it, the read of agents a look would find nothing for (empty-looks.ts). */
  emptyLooks?: EmptyLooks;
}

/** A claim on several agents: `end` aborts to end its wait (a withdrawal); `widening` lets its caller add agents while it waits. */
export type ClaimAnyOptions = Omit<ClaimOptions, 'max'> & { end?: AbortSignal; widening?: Widening };

/** Admit queued executions of any of `items`' agents, each up to its `max`, waiting up to `waitMs` for one to have work (claim-any.ts). */
export async function claimAny(e: ClaimAnyEngine, items: readonly ClaimAnyItem[], opts: ClaimAnyOptions): Promise<ExecutionRow[]> {
  const base = { owner: opts.owner, delivery: opts.delivery ?? 'pull', keyId: opts.keyId } as const;
  // Each option named, not `{ ...base, more }`: on Node 20 an object literal with anything after a
  // spread takes V8's slow path (about 1 µs a call, create.ts queuedValues).
  const { owner, delivery, keyId } = base;
  const admit: AdmitAgent = (i, hint, maxBytes) =>
    e.admitOnce(i.agent, Object.assign({ owner, delivery, keyId, now: 0, max: i.max, maxBytes }, reportTo(hint)));
  const admitted = e.admitted;
  const handoff = admitted // parked, a submit of one of its agents may take it, as a single claim (engine.claim)
    ? { request: (i: ClaimAnyItem) => ({ owner, delivery, keyId, max: i.max }), admitted }
    : undefined;
  const read = e.emptyLooks;
  const emptyLooks = read && ((agents: readonly string[]) => read(agents, base.delivery));
  const rows = await waitAny(
    e.waits,
    items,
    { waitMs: opts.waitMs ?? 0, signal: opts.signal, end: opts.end, handoff, emptyLooks, widening: opts.widening },
    admit,
  );
  if (rows.length === 0 || !opts.signal?.aborted) return rows;
  // Its caller left while the look was out: back to the queue now, not leased to nobody until the lease lapses.
  await e.giveBack(rows, opts.owner);
  return [];
}
