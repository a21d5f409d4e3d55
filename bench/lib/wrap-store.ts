import type { Kysely } from 'kysely';
import type { StoreAdapter, Tx } from '../../src/store/adapter.ts';
import type { DB } from '../../src/store/schema.ts';

/**
 * `inner` with every handle it gives out (its writer, its reader, each transaction's and each
 * snapshot's) passed through `wrap` first: a bench that records or times statements wraps a store
 * with this and its own Kysely plugin.
 */
export function wrapStore(inner: StoreAdapter, wrap: <K extends Kysely<DB>>(k: K) => K): StoreAdapter {
  return Object.assign(Object.create(inner) as StoreAdapter, {
    db: wrap(inner.db),
    reader: wrap(inner.reader),
    transaction: <T>(fn: (tx: Tx) => Promise<T>) => inner.transaction((tx) => fn(wrap(tx))),
    snapshot: <T>(fn: (tx: Tx) => Promise<T>) => inner.snapshot((tx) => fn(wrap(tx))),
  });
}
