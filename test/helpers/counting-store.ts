import type { Kysely, KyselyPlugin } from 'kysely';
import type { StoreAdapter, Tx } from '../../src/store/adapter.ts';
import type { DB } from '../../src/store/schema.ts';

/** What a store sent: statements (a transaction's BEGIN and COMMIT not included) and transactions begun. */
export interface SentCounts {
  statements: number;
  transactions: number;
}

export const noneSent = (): SentCounts => ({ statements: 0, transactions: 0 });

/** The same store, counting into `counts` every statement sent through it and every transaction begun. */
export function countingStore(inner: StoreAdapter, counts: SentCounts): StoreAdapter {
  const plugin: KyselyPlugin = {
    // Once per statement executed (transformQuery also sees each CTE's own query builder).
    transformQuery: ({ node }) => node,
    transformResult: async ({ result }) => {
      counts.statements++;
      return result;
    },
  };
  const wrap = <K extends Kysely<DB>>(k: K) => k.withPlugin(plugin) as K;
  return Object.assign(Object.create(inner) as StoreAdapter, {
    db: wrap(inner.db),
    transaction: <T>(fn: (tx: Tx) => Promise<T>) => {
      counts.transactions++;
      return inner.transaction((tx) => fn(wrap(tx)));
    },
  });
}

/** `fn`'s result and the statements it sent (counted into `counts` by countingStore). */
export async function counted<T>(counts: SentCounts, fn: () => Promise<T>): Promise<{ out: T; statements: number }> {
  counts.statements = 0;
  const out = await fn();
  return { out, statements: counts.statements };
}
