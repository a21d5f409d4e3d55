import type { CompiledQuery, Insertable, Kysely, QueryResult, RawBuilder, SelectQueryBuilder } from 'kysely';
import type { FastPaths } from './fast-paths.ts';
import type { HistorySize } from './history-size.ts';
import type { AgentRow, DB } from './schema.ts';
import type { Topic } from './signals.ts';

declare const txBrand: unique symbol;
/** A Kysely handle bound to one open transaction. Functions that lock or write rows take a Tx. */
export type Tx = Kysely<DB> & { readonly [txBrand]: true };

/** Compiled statements run one after another in a transaction; their results in the same order. */
export type InOrder = (queries: readonly CompiledQuery[]) => Promise<QueryResult<unknown>[]>;

/** InOrder on `tx`, a statement at a time (where nothing sends them together). */
export const inOrderOn =
  (tx: Tx): InOrder =>
  async (queries) => {
    const out: QueryResult<unknown>[] = [];
    for (const q of queries) out.push(await tx.executeQuery(q));
    return out;
  };

export type StoreKind = 'sqlite' | 'postgres';
/** Tables written in bulk. */
export type BulkTable = 'executions' | 'audit_log';
export type LockMode = 'wait' | 'skip' | 'admission' | 'existence';

/** One member of a retry chain the pruner deletes. */
export interface ChainMember {
  id: string;
  retry_number: number;
}
/** A retry chain, which goes whole or not at all. */
export type ExecutionChain = readonly ChainMember[];

/** Rows one delete of executions removed, per table. */
export interface PrunedRows {
  executions: number;
  events: number;
  logs: number;
  keys: number;
}

/**
 * Everything that differs between SQLite and PostgreSQL, in one place. The engine never asks
 * which database it is on; it calls these methods.
 */
/** One finding of a read-only check, as `baton doctor` lists them. */
export interface StoreCheck {
  check: string;
  /** ok · warn (worth a look, not a failure) · fail (exit non-zero) · skip (not applicable here) */
  status: 'ok' | 'warn' | 'fail' | 'skip';
  detail: string;
}

/**
 * A key's fairness rounds (src/domain/flow.ts: a keyed task takes round max(last round of its key
 * + 1, agent.admit_round)), taken by a creator holding the agent's new-work turn: `n` rounds, the
 * last returned. `room`: only while the agent's backlog has room for `n` more (a `check` creation,
 * so a refused task takes no round; null returned); false: the caller counted the room itself.
 * StoreAdapter.keyRounds; src/store/key-rounds.ts.
 */
export interface KeyRoundsRequest {
  agent: string;
  key: string;
  n: number;
  room: boolean;
}

export interface StoreAdapter {
  readonly kind: StoreKind;
  /** What to show of the store in logs and status answers (readyz, GET /v1/history); nothing decides by it. */
  describe(): { kind: StoreKind };
  /**
   * Whether several processes serve this store at once (PostgreSQL), so a pass that must run once
   * per deployment, such as the pruner, holds a leader lease. SQLite: false, one process serves
   * the file (the one-server lock, sqlite-lock.ts).
   */
  readonly sharedByProcesses: boolean;
  /**
   * Milliseconds since the epoch by the one clock every stored time (lease expiry, deadlines, due
   * times, throttle windows, event stamps) is computed from and compared with. PostgreSQL: the
   * database server's clock, read without a round trip (this process's monotonic clock plus an
   * offset measured at open, every minute and after a jump, postgres-clock.ts), so a process whose own clock is
   * wrong cannot reap another's live lease or fire a schedule early. SQLite: this process's wall
   * clock (one process serves the file; docs/operations.md says what a clock step does there).
   */
  now(): number;
  /**
   * How far `now()`'s clock is from this process's own (positive: the store's clock is ahead), and
   * the bound on that measurement's error. SQLite: zero, exactly.
   */
  clockSkew(): { offsetMs: number; errorMs: number };
  /**
   * Whether executions have indexes in created_at order over every status (PostgreSQL:
   * executions_recent and executions_agent_recent). SQLite has none (each cost every insert and
   * every pruned row an index entry): a read of all executions, or of one agent's, by creation
   * time seeks each status's own index (executions_status_recent, executions_agent_status_recent)
   * and merges.
   */
  readonly createdOrderIndexes: boolean;
  /**
   * The hot transitions as single operations outside a transaction (fast-paths.ts says which and
   * when): PostgreSQL, where that saves the BEGIN and COMMIT round trips, unless opened with
   * `fastPaths: false`. Undefined on SQLite (its write transactions are group-committed, so the
   * engine's transaction is its implementation) and then the engine runs every transition in one.
   */
  readonly fastPaths?: FastPaths;
  /**
   * Whether a statement's WITH may hold an INSERT or UPDATE whose rows the statement goes on to
   * read (a data-modifying CTE): PostgreSQL yes, SQLite no. Lets a write and its audit row share
   * one statement.
   */
  readonly cteWrites: boolean;
  /**
   * Run one statement alone, outside a transaction (fastPaths' operations do); PostgreSQL runs it
   * again when the database ended it on a conflict (a deadlock with another transaction, a serialization failure, a lock not available:
   * its writes were all undone, as a transaction's are), as `transaction` does. SQLite: once.
   */
  lone<T>(statement: () => Promise<T>): Promise<T>;
  /** Shared handle for reads outside a transaction. Never use it inside `transaction()`. */
  readonly db: Kysely<DB>;

  /**
   * Run `fn` in a write transaction. SQLite: BEGIN IMMEDIATE (one writer at a time, so every
   * read inside sees the latest committed state); the transactions that arrive in one
   * event-loop turn share one BEGIN … COMMIT, each in its own savepoint, with its own answer and
   * its own error, settled only after the shared COMMIT (group commit, sqlite-group-commit.ts).
   * PostgreSQL: READ COMMITTED, retried on serialization failures and deadlocks (see retryable
   * SQLSTATEs in postgres.ts). Either way `fn` must not start another transaction or touch `db`.
   */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;

  /**
   * SQLite: `transaction`, but for one write too large to make on the event loop, such as a
   * completion whose result is hundreds of KiB or more. Its UPDATE copies the value into SQLite,
   * a long step for megabytes. The transaction (BEGIN IMMEDIATE, not
   * group-committed) runs on the writer thread's connection while this one's turn is held, as a
   * prune batch does, so the event loop stays free and nothing on `db` runs meanwhile. The same
   * rule holds: `fn` works through `tx` only. Absent on PostgreSQL (the database does the work)
   * and on an in-memory SQLite (no second connection): use `transaction`.
   */
  offLoopTransaction?<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;

  /**
   * SQLite: call `fn` once `tx`'s own work is done, before its COMMIT, and let the transactions
   * `fn` starts at once (within the microtasks it sets off) join that COMMIT: they run after `tx`
   * in the same BEGIN … COMMIT, each in its own savepoint, see what `tx` wrote, and settle after
   * the COMMIT, failing with it if it fails. Not called if `tx` fails. A claimer parked on the
   * agent of a task just submitted is so admitted without a transaction of its own, and its
   * answer leaves with the submit's. Absent where each transaction commits alone (PostgreSQL):
   * there a plain submit's own call takes such a claimer (FastPaths.submitClaim), and the
   * announcement after the commit wakes the others.
   */
  shareCommit?(tx: Tx, fn: () => void): void;

  /**
   * Run `fn` over one consistent read-only snapshot (REPEATABLE READ on PostgreSQL). On SQLite
   * it runs on the reader connection (see `reader`), so a long snapshot never holds the writer.
   */
  snapshot<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;

  /**
   * Handle for long or large reads (canary, metrics, stats, exports) that must not hold the
   * event loop or the writer. SQLite: a read-only connection in a worker thread (WAL lets it
   * read beside the writer); an in-memory database has no second connection and uses `db`.
   * PostgreSQL: the pool, as `db` (the database does the work; Node only waits).
   */
  readonly reader: Kysely<DB>;

  /**
   * Run `fn` in a write transaction that the database lets delete history (execution_events,
   * audit_log are append-only for everyone else). Only the pruner calls this. SQLite: sets and
   * clears retention_state.pruning inside the transaction, which runs on a writer connection in
   * a worker thread (the event loop stays free) while other work on `db` waits its turn;
   * `contended()` says someone is waiting, and the pruner then commits what it has done.
   * PostgreSQL: SET LOCAL baton.pruning; it locks only the rows it deletes, so `contended()` is
   * always false. `fn` works through `tx` only: on SQLite a statement on `db` inside it would wait
   * for the batch that waits for it. `inOrder` runs statements compiled from `tx` one after
   * another in this transaction, on SQLite's writer thread as one round trip.
   */
  pruneTransaction<T>(fn: (tx: Tx, contended: () => boolean, inOrder: InOrder) => Promise<T>): Promise<T>;

  /**
   * Return up to `pages` free pages to the file system, after the pruner deleted rows. SQLite
   * (incremental auto-vacuum): one PRAGMA incremental_vacuum(pages) on the pruner's writer thread
   * while other work on `db` waits its turn, as a prune batch — keep `pages` small, others wait for
   * it (a larger step held other work too long under load, so the pruner steps VACUUM_STEP_PAGES); the pruner
   * checkpoints after each step, with the writer's automatic checkpoint still set aside
   * (`sweepCheckpoints`). Resolves with the free pages left.
   * PostgreSQL: a no-op resolving 0 — autovacuum makes dead rows' space reusable in place.
   */
  reclaimSpace(pages: number): Promise<number>;

  /**
   * Whether a prune sweep does the database's upkeep itself: WAL checkpoints between batches
   * (`sweepCheckpoints`, `checkpoint`) and freed pages returned after the last (`reclaimSpace`).
   * SQLite: true. PostgreSQL: false, its checkpointer and autovacuum do both, and those methods
   * are no-ops there.
   */
  readonly pruneUpkeep: boolean;

  /** Executions per prune batch (one `pruneTransaction`) unless the caller says otherwise (prune-deletes.ts says why each). */
  readonly pruneBatch: number;

  /**
   * Delete whole retry chains with everything their executions own (events, log lines and head,
   * idempotency keys, the chain links they started) inside `pruneTransaction`, given its `tx`,
   * `contended` and `inOrder`, and add the executions deleted to retention_state's total.
   * PostgreSQL: every chain in one statement. SQLite: about PRUNE_DELETE_CHUNK executions at a
   * time, and between two chunks it stops when `contended()`. Resolves with the rows deleted and
   * how many of `chains`, from the first, went.
   */
  deleteExecutionChains(
    tx: Tx,
    chains: readonly ExecutionChain[],
    contended: () => boolean,
    inOrder: InOrder,
  ): Promise<PrunedRows & { chains: number }>;

  /**
   * The size of `tables` without scanning them, through `reader` (history-size.ts): estimated
   * rows per table, bytes the store takes, and bytes free for reuse (SQLite; null on PostgreSQL).
   */
  historySize<T extends string>(tables: readonly T[]): Promise<HistorySize<T>>;

  /**
   * WAL checkpoints while the pruner sweeps. SQLite runs its automatic checkpoint inside the
   * commit that takes the WAL past its bound, on the event loop (the store raises the bound to a
   * backstop, WRITER_AUTOCHECKPOINT_PAGES, and checkpoints on its worker thread every
   * BACKGROUND_CHECKPOINT_MS instead: sqlite.ts); with SQLite's default bound a prune batch's
   * commit also copied the pages it dirtied back into the database file (most of a batch's time on
   * a long history).
   * `sweepCheckpoints(true)` raises the writer connection's automatic checkpoint to a far bound
   * (SWEEP_AUTOCHECKPOINT_PAGES, a backstop) for the sweep; the pruner then runs `checkpoint()` as
   * a step of its own between batches, and `sweepCheckpoints(false)` restores the setting found.
   * Checkpoints are not durability (a commit is durable once in the WAL): a process that dies
   * mid-sweep leaves a longer WAL, replayed or checkpointed by the next open, and a new
   * connection starts with the default. `checkpoint()` is one PASSIVE checkpoint (it waits for
   * no reader, and takes no write lock: SQLite runs it on the pruner's worker thread while other
   * writers go on) and resolves with the frames the WAL held (the pages written since it last started
   * over).
   * PostgreSQL: no-ops (its checkpointer is a process of its own).
   */
  sweepCheckpoints(manual: boolean): Promise<void>;
  checkpoint(): Promise<number>;

  /**
   * Lock the rows a SELECT returns until the transaction ends (PostgreSQL modes):
   * - `wait` — FOR UPDATE: exclusive, e.g. before deleting an agent or changing one execution;
   * - `skip` — FOR NO KEY UPDATE SKIP LOCKED: take only rows nobody else holds (claims, reaper);
   * - `admission` — FOR NO KEY UPDATE on an agent row: admissions for one agent take turns;
   * - `existence` — FOR KEY SHARE: the row cannot be deleted meanwhile, yet admissions and
   *   setting changes go on (an agent joining a pool holds the pool so, before it writes the
   *   row that refers to it: a deletion then waits and sees the member, or went first and the
   *   pool is not found).
   * SQLite: a no-op, because BEGIN IMMEDIATE already holds the only write lock.
   */
  lockRows<QB extends SelectQueryBuilder<any, any, any>>(qb: QB, mode: LockMode): QB;

  /**
   * Hold agent rows for creating new work until the transaction ends (engine/agent-lock.ts says
   * why): PostgreSQL takes an existence lock on each row (FOR KEY SHARE) and then a per-agent
   * turn (a transaction advisory lock keyed `new-work:<name>`), in name order, in one statement;
   * SQLite reads the rows (BEGIN IMMEDIATE already excludes every other writer). `names` come
   * sorted; the rows found are returned in that order.
   */
  holdForNewWork(tx: Tx, names: readonly string[]): Promise<AgentRow[]>;

  /**
   * Take `n` fairness rounds of a key for a creation, holding the agent's new-work turn
   * (src/store/key-rounds.ts): the last round, or null where `room` was asked and the agent's
   * backlog has none (nothing written). PostgreSQL: its function baton_key_rounds, which its
   * one-call submit runs too; SQLite: the same statement in process.
   */
  keyRounds(tx: Tx, r: KeyRoundsRequest): Promise<number | null>;

  /**
   * Insert many rows in few statements (the scheduler's batch path). Columns are the union of
   * the rows' keys; a key a row lacks is NULL. PostgreSQL sends each chunk as one JSON value
   * expanded by json_populate_recordset rather than one bound value per column per row
   * (markedly faster for thousands of rows); SQLite, in process, uses
   * multi-row VALUES.
   */
  insertMany<T extends BulkTable>(tx: Tx, table: T, rows: Array<Insertable<DB[T]>>): Promise<void>;

  /**
   * A table function over a JSON array: one row per element, in a column named `value` (read
   * fields with `value->>'name'`). PostgreSQL: json_array_elements; SQLite: json_each. Lets a
   * statement take many rows as one bound value.
   */
  jsonElements(json: string): RawBuilder<unknown>;

  /**
   * Tell every process (this one at once, others via LISTEN/NOTIFY on PostgreSQL) that something
   * happened. Best effort: a lost signal costs latency, never correctness (waiters also poll).
   */
  publish(topic: Topic, message: string): void;
  /** `local` is true when this process published the message, false when it came from another one. */
  subscribe(topic: Topic, listener: (message: string, local: boolean) => void): () => void;

  /** Apply pending migrations under a cross-process lock. Returns the versions recorded (src/store/migrations.ts). */
  migrate(): Promise<number[]>;
  /** Versions applied and the newest version this code knows. */
  migrationStatus(): Promise<{ applied: number[]; known: number[] }>;
  /**
   * Why the store has nothing to read yet though its database answers, read without creating
   * anything (`baton doctor`): PostgreSQL names a configured schema that does not exist. Undefined
   * when it is there, and always on SQLite (the file is the store).
   */
  missingSetup(): Promise<string | undefined>;
  /**
   * `baton doctor`'s checks of the database settings Baton relies on, read only: PostgreSQL's
   * autovacuum on for Baton's tables. SQLite: none.
   */
  settingChecks(): Promise<StoreCheck[]>;

  close(): Promise<void>;
}

/** Rows per bulk INSERT. SQLite binds each value (~45 per execution row), well under its limit. */
export const BULK_CHUNK = 200;

/**
 * A bulk insert's statement also ends after the row that brings its text values to this many
 * characters: each statement's values are copied whole on the event loop (posted to SQLite's
 * thread, serialised for PostgreSQL), so megabytes of payloads go a megabyte a step.
 */
export const BULK_CHUNK_CHARS = 1 << 20;

/** Where the bulk statement of `rows` from `start` ends: at most `maxRows` rows, or BULK_CHUNK_CHARS characters of text (at least one row). */
export function bulkChunkEnd(rows: readonly object[], start: number, maxRows: number): number {
  let end = start;
  for (let chars = 0; end < rows.length && end - start < maxRows && chars < BULK_CHUNK_CHARS; end++) {
    const row = rows[end] as Record<string, unknown>;
    for (const k in row) {
      const v = row[k];
      if (typeof v === 'string') chars += v.length;
    }
  }
  return end;
}

/** The union of the rows' keys, in first-seen order. */
export function bulkColumns(rows: ReadonlyArray<Record<string, unknown>>): string[] {
  const seen = new Set<string>();
  for (const r of rows) for (const k in r) seen.add(k);
  return [...seen];
}

/**
 * Make each method of `store`'s class an own property bound to it. A store is a plain value to its
 * callers: one may wrap a method by spreading it (`{ ...store, snapshot: … }`), and the copy's
 * methods must still act on the store.
 */
export function bindMethods(store: object): void {
  const self = store as Record<string, unknown>;
  for (let proto = Object.getPrototypeOf(store); proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    for (const [name, d] of Object.entries(Object.getOwnPropertyDescriptors(proto))) {
      if (name === 'constructor' || typeof d.value !== 'function' || Object.hasOwn(self, name)) continue;
      self[name] = (d.value as (...args: unknown[]) => unknown).bind(store);
    }
  }
}
