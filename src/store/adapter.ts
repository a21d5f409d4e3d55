import type { Kysely, SelectQueryBuilder } from 'kysely';
import type { DB } from './schema.ts';
import type { Topic } from './signals.ts';

declare const txBrand: unique symbol;
/** A Kysely handle bound to one open transaction. Functions that lock or write rows take a Tx. */
export type Tx = Kysely<DB> & { readonly [txBrand]: true };

export type StoreKind = 'sqlite' | 'postgres';
export type LockMode = 'wait' | 'skip' | 'admission' | 'existence';

/**
 * Everything that differs between SQLite and PostgreSQL, in one place. The engine never asks
 * which database it is on; it calls these methods.
 */
export interface StoreAdapter {
  readonly kind: StoreKind;
  /** Shared handle for reads outside a transaction. Never use it inside `transaction()`. */
  readonly db: Kysely<DB>;

  /**
   * Run `fn` in a write transaction. SQLite: BEGIN IMMEDIATE (one writer at a time, so every
   * read inside sees the latest committed state). PostgreSQL: READ COMMITTED, retried on
   * serialization failures and deadlocks (see retryable SQLSTATEs in postgres.ts).
   */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;

  /** Run `fn` over one consistent read-only snapshot (REPEATABLE READ on PostgreSQL). */
  snapshot<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;

  /**
   * Lock the rows a SELECT returns until the transaction ends (PostgreSQL modes):
   * - `wait` — FOR UPDATE: exclusive, e.g. before deleting an agent or changing one execution;
   * - `skip` — FOR NO KEY UPDATE SKIP LOCKED: take only rows nobody else holds (claims, reaper);
   * - `admission` — FOR NO KEY UPDATE on an agent row: admissions for one agent take turns;
   * - `existence` — FOR KEY SHARE on an agent row: it cannot be deleted meanwhile, yet
   *   admissions and setting changes go on (submits use it, so they never queue behind claims).
   * SQLite: a no-op, because BEGIN IMMEDIATE already holds the only write lock.
   */
  lockRows<QB extends SelectQueryBuilder<any, any, any>>(qb: QB, mode: LockMode): QB;

  /**
   * Serialise transactions that pass the same key until they end (PostgreSQL: transaction
   * advisory locks, all `keys` in one statement, taken in one fixed order so callers holding
   * several never wait on each other in a cycle). SQLite: a no-op, for the same reason as lockRows.
   */
  serialize(tx: Tx, keys: string[]): Promise<void>;

  /**
   * Tell every process (this one at once, others via LISTEN/NOTIFY on PostgreSQL) that something
   * happened. Best effort: a lost signal costs latency, never correctness (waiters also poll).
   */
  publish(topic: Topic, message: string): void;
  subscribe(topic: Topic, listener: (message: string) => void): () => void;

  /** Apply pending migrations under a cross-process lock. Returns versions applied. */
  migrate(): Promise<number[]>;
  /** Versions applied and the newest version this code knows. */
  migrationStatus(): Promise<{ applied: number[]; known: number[] }>;

  close(): Promise<void>;
}
