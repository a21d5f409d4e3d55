import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { AgentRow } from '../store/schema.ts';

declare const held: unique symbol;
/**
 * An agent row read by lockAgentsForNewWork: its new-work turn is held until the transaction
 * ends. createExecutions (transitions/create.ts) checks backlogs only for agents of this type,
 * so the signature says the caller took the turn.
 */
export type HeldAgent = AgentRow & { readonly [held]: true };

/**
 * Hold agents for creating new work (a submit, a trigger, a scheduler batch) until the
 * transaction ends. Each agent row gets an existence lock (it cannot be deleted meanwhile, yet
 * admissions and setting changes go on), then creators of work for the same agent take turns on
 * a per-agent key. So backlog reads (engine/backlog.ts) and overlap checks made next are exact, and creating work
 * never waits for claims. Names are taken in order, so batches never wait on each other in a
 * cycle. Returns the rows found (unknown names are missing).
 */
export async function lockAgentsForNewWork(tx: Tx, store: StoreAdapter, names: string[]): Promise<HeldAgent[]> {
  const sorted = [...new Set(names)].sort();
  if (sorted.length === 0) return [];
  return (await store.holdForNewWork(tx, sorted)) as HeldAgent[];
}
