import { setImmediate as nextTurn } from 'node:timers/promises';
import type Database from 'better-sqlite3';
import { Kysely, sql, type Insertable, type RawBuilder, type SelectQueryBuilder } from 'kysely';
import {
  BULK_CHUNK,
  bulkChunkEnd,
  bindMethods,
  bulkColumns,
  inOrderOn,
  type BulkTable,
  type ExecutionChain,
  type InOrder,
  type StoreAdapter,
  type StoreCheck,
  type StoreKind,
  type KeyRoundsRequest,
  type Tx,
} from './adapter.ts';
import { sqliteKeyRounds } from './key-rounds.ts';
import { historySizeSqlite, type HistorySize } from './history-size.ts';
import { preparedQuery } from './prepared-query.ts';
import { deleteChainsSqlite, PRUNE_BATCH } from './prune-deletes.ts';
import type { AgentRow, DB } from './schema.ts';
import { LocalSignals, type Topic } from './signals.ts';
import {
  BACKGROUND_CHECKPOINT_MS,
  BackgroundCheckpoints,
  SWEEP_AUTOCHECKPOINT_PAGES,
  WAL_RESTART_FRAMES,
  WRITER_AUTOCHECKPOINT_PAGES,
  type CheckpointStats,
} from './sqlite-checkpoints.ts';
import {
  cachedStatements,
  createPrivately,
  heldHandle,
  openMainConnection,
  SchemaCookie,
  WatchedSqliteDialect,
} from './sqlite-connection.ts';
import { GROUP_LIMITS, GroupCommit, type GroupCommitStats, type GroupLimits } from './sqlite-group-commit.ts';
import { lockSqliteStore, type StoreLock } from './sqlite-lock.ts';
import { migrateSqlite, sqliteMigrationStatus } from './sqlite-migrate.ts';
import { openSqliteReader, openSqliteWriterThread, type SqliteWriterThread } from './sqlite-reader.ts';

export {
  BACKGROUND_CHECKPOINT_MS,
  SWEEP_AUTOCHECKPOINT_PAGES,
  WAL_RESTART_FRAMES,
  WRITER_AUTOCHECKPOINT_PAGES,
  type CheckpointStats,
} from './sqlite-checkpoints.ts';

/** holdForNewWork of one agent (a submit's), built once: BEGIN IMMEDIATE already holds every writer off. */
const holdOne = preparedQuery((tx: Tx, p: { name: string }) => tx.selectFrom('agents').selectAll().where('name', '=', p.name));

/** What group commit has done on this store; undefined for a store that is not SQLite. */
export function commitStats(store: StoreAdapter): Readonly<GroupCommitStats> | undefined {
  return sqliteStores.get(store)?.groupStats;
}

/** Background checkpoints of this store; undefined for a store without them (in-memory, PostgreSQL). */
export function checkpointStats(store: StoreAdapter): Readonly<CheckpointStats> | undefined {
  return sqliteStores.get(store)?.checkpointStats;
}

/**
 * Embedded store: one SQLite file in WAL mode, for a single `baton` process. Kysely's SQLite
 * driver serialises every statement through one connection, so a transaction started with
 * BEGIN IMMEDIATE sees and writes alone; admission needs no row locks here. Write transactions
 * are group-committed (sqlite-group-commit.ts); snapshots and migrations run alone, and the prune
 * transaction runs on a read-write connection in a worker thread while this one waits its turn.
 */
export interface SqliteOptions {
  /** Bounds on one group commit (default GROUP_LIMITS: 256 transactions or ~10 ms of work). */
  groupLimits?: Partial<GroupLimits>;
  /**
   * How often the worker thread checkpoints the WAL (default BACKGROUND_CHECKPOINT_MS); 0 turns
   * background checkpoints off and leaves SQLite's automatic checkpoint at its default.
   */
  checkpointEveryMs?: number;
  /** The WAL length at which a background checkpoint lets the WAL start over (default WAL_RESTART_FRAMES). */
  walRestartFrames?: number;
  /** Take the one-server lock until close (`baton up`: sqlite-lock.ts); fails if another process holds it. */
  serve?: boolean;
}

export function openSqlite(file: string, opts: SqliteOptions = {}): StoreAdapter {
  if (file !== ':memory:') createPrivately(file);
  const lock = opts.serve && file !== ':memory:' ? lockSqliteStore(file) : undefined;
  try {
    return new SqliteStore(file, opts, lock);
  } catch (err) {
    // Not a database, a read-only directory…: the next open in this process may take the lock.
    lock?.release();
    throw err;
  }
}

/** Open SQLite stores, for commitStats and checkpointStats (a spread copy of one is not found). */
const sqliteStores = new WeakMap<StoreAdapter, SqliteStore>();

class SqliteStore implements StoreAdapter {
  readonly kind: StoreKind = 'sqlite';
  readonly cteWrites = false;
  readonly sharedByProcesses = false;
  readonly createdOrderIndexes = false;
  readonly pruneUpkeep = true;
  readonly pruneBatch = PRUNE_BATCH.sqlite;
  readonly db: Kysely<DB>;
  /**
   * Long reads (canary, metrics, stats, exports) run on a second, read-only connection in a worker
   * thread; an in-memory database cannot be opened twice, so it reads on `db`.
   */
  readonly reader: Kysely<DB>;
  readonly offLoopTransaction?: <T>(fn: (tx: Tx) => Promise<T>) => Promise<T>;

  private readonly raw: Database.Database;
  private readonly dialect: WatchedSqliteDialect;
  // One process per SQLite file, so in-process delivery reaches every subscriber.
  private readonly signals = new LocalSignals();
  /**
   * The pruner's deletes and WAL checkpoints run on a read-write connection in a worker thread of
   * their own (pruneTransaction, checkpoint); an in-memory database has only `db`.
   */
  private readonly writerThread: SqliteWriterThread | undefined;
  private readonly groups: GroupCommit;
  private readonly background: BackgroundCheckpoints | undefined;
  /** The automatic checkpoint found when a prune sweep set it aside (undefined: no sweep holds it). */
  private savedAutoCheckpoint: number | undefined;
  /** Transactions committed on the writer thread by offLoopTransaction (for the checkpoint timer). */
  private offLoopCommits = 0;

  constructor(
    private readonly file: string,
    opts: SqliteOptions,
    private readonly lock: StoreLock | undefined,
  ) {
    this.raw = openMainConnection(file);
    const schema = new SchemaCookie(this.raw);
    const statements = cachedStatements(this.raw, schema);
    this.dialect = new WatchedSqliteDialect({ database: statements });
    this.db = new Kysely<DB>({ dialect: this.dialect });
    let held: Kysely<DB> | undefined;
    this.reader = file === ':memory:' ? this.db : openSqliteReader(file);
    this.writerThread = file === ':memory:' ? undefined : openSqliteWriterThread(file);
    this.groups = new GroupCommit(
      this.db,
      this.raw,
      { ...GROUP_LIMITS, ...opts.groupLimits },
      () => (held ??= heldHandle(this.dialect, statements, this.db)),
      schema,
    );
    const everyMs = opts.checkpointEveryMs ?? BACKGROUND_CHECKPOINT_MS;
    if (this.writerThread && everyMs > 0) {
      this.background = new BackgroundCheckpoints({
        everyMs,
        walRestartFrames: opts.walRestartFrames ?? WAL_RESTART_FRAMES,
        commits: () => this.groups.stats.commits + this.offLoopCommits,
        sweeping: () => this.savedAutoCheckpoint !== undefined,
        checkpoint: () => this.checkpoint(),
        holdingTurn: (fn) => this.db.connection().execute(fn),
      });
      this.raw.pragma(`wal_autocheckpoint = ${WRITER_AUTOCHECKPOINT_PAGES}`);
    }
    // On the writer thread while this holds the main connection's turn, as a prune batch.
    const writer = this.writerThread;
    if (writer)
      this.offLoopTransaction = (fn) =>
        this.db.connection().execute(async () => {
          const out = await this.inTransaction(writer.db, 'BEGIN IMMEDIATE', fn);
          this.offLoopCommits++;
          return out;
        });
    bindMethods(this);
    sqliteStores.set(this, this);
  }

  get groupStats(): Readonly<GroupCommitStats> {
    return this.groups.stats;
  }

  get checkpointStats(): Readonly<CheckpointStats> | undefined {
    return this.background?.stats;
  }

  // One process serves the file: its own wall clock is the only one.
  now(): number {
    return Date.now();
  }

  clockSkew(): { offsetMs: number; errorMs: number } {
    return { offsetMs: 0, errorMs: 0 };
  }

  describe(): { kind: StoreKind } {
    return { kind: this.kind };
  }

  lone<T>(statement: () => Promise<T>): Promise<T> {
    return statement();
  }

  // Write transactions that arrive in one event-loop turn share one COMMIT (sqlite-group-commit.ts).
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.groups.run(fn);
  }

  shareCommit(_tx: Tx, fn: () => void): void {
    this.groups.shareCommit(fn);
  }

  snapshot<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.inTransaction(this.reader, 'BEGIN', fn);
  }

  private inTransaction<T>(handle: Kysely<DB>, begin: string, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return handle.connection().execute(async (conn) => {
      await sql.raw(begin).execute(conn);
      try {
        const out = await fn(conn as Tx);
        await sql.raw('COMMIT').execute(conn);
        return out;
      } catch (err) {
        // The main connection knows whether a transaction is open; the reader's BEGIN is
        // deferred and read-only, so a ROLLBACK there can only fail harmlessly.
        if (handle !== this.db || this.raw.inTransaction)
          await sql
            .raw('ROLLBACK')
            .execute(conn)
            .catch(() => undefined);
        throw err;
      }
    });
  }

  pruneTransaction<T>(fn: (tx: Tx, contended: () => boolean, inOrder: InOrder) => Promise<T>): Promise<T> {
    const run = (handle: Kysely<DB>, inOrder?: InOrder) =>
      this.inTransaction(handle, 'BEGIN IMMEDIATE', async (tx) => {
        await sql`UPDATE retention_state SET pruning = 1 WHERE id = 'retention'`.execute(tx);
        const out = await fn(tx, () => this.dialect.waiting > 0, inOrder ?? inOrderOn(tx));
        await sql`UPDATE retention_state SET pruning = 0 WHERE id = 'retention'`.execute(tx);
        return out;
      });
    // The batch runs on the writer thread while this holds the main connection's turn: nothing
    // on `db` (which would wait for the write lock inside better-sqlite3, on the event loop)
    // runs meanwhile; it waits its turn asynchronously, and its wait is what `contended` sees.
    const writer = this.writerThread;
    return writer ? this.db.connection().execute(() => run(writer.db, writer.inOrder)) : run(this.db);
  }

  deleteExecutionChains(tx: Tx, chains: readonly ExecutionChain[], contended: () => boolean, inOrder: InOrder) {
    return deleteChainsSqlite(tx, chains, contended, inOrder);
  }

  historySize<T extends string>(tables: readonly T[]): Promise<HistorySize<T>> {
    return historySizeSqlite(this.reader, tables);
  }

  reclaimSpace(pages: number): Promise<number> {
    // On the pruner's thread while this holds the main connection's turn, as a prune batch: the
    // step and its commit (and, with the writer's automatic checkpoint back, the checkpoint that
    // commit would run) held the event loop too long after a large prune.
    // In-memory: on the raw handle. Either way pragma() steps the statement to the end (each
    // step frees one page).
    return this.db.connection().execute(async () => {
      const step = `incremental_vacuum(${Math.max(1, Math.floor(pages))})`;
      const writer = this.writerThread?.db;
      if (!writer) {
        this.raw.pragma(step);
        return Number(this.raw.pragma('freelist_count', { simple: true }));
      }
      await sql.raw(`PRAGMA ${step}`).execute(writer);
      const { rows } = await sql<{ freelist_count: number }>`PRAGMA freelist_count`.execute(writer);
      return Number(rows[0]?.freelist_count ?? 0);
    });
  }

  sweepCheckpoints(manual: boolean): Promise<void> {
    return this.db.connection().execute(async () => {
      if (manual && this.savedAutoCheckpoint === undefined) {
        this.savedAutoCheckpoint = Number(this.raw.pragma('wal_autocheckpoint', { simple: true }));
        this.raw.pragma(`wal_autocheckpoint = ${SWEEP_AUTOCHECKPOINT_PAGES}`);
      } else if (!manual && this.savedAutoCheckpoint !== undefined) {
        this.raw.pragma(`wal_autocheckpoint = ${this.savedAutoCheckpoint}`);
        this.savedAutoCheckpoint = undefined;
      }
    });
  }

  async checkpoint(): Promise<number> {
    // On the writer thread, outside any transaction, without the main connection's turn: a
    // PASSIVE checkpoint takes no write lock, so writers on `db` go on while it copies and syncs.
    // (In-memory: there is no WAL.)
    const writer = this.writerThread?.db;
    if (!writer) return 0;
    const { rows } = await sql<{ log: number }>`PRAGMA wal_checkpoint(PASSIVE)`.execute(writer);
    return Number(rows[0]?.log ?? 0);
  }

  lockRows<QB extends SelectQueryBuilder<any, any, any>>(qb: QB): QB {
    return qb; // BEGIN IMMEDIATE already excludes every other writer.
  }

  holdForNewWork(tx: Tx, names: readonly string[]): Promise<AgentRow[]> {
    return names.length === 1
      ? holdOne(tx, { name: names[0]! })
      : tx.selectFrom('agents').selectAll().where('name', 'in', names).orderBy('name').execute();
  }

  keyRounds(tx: Tx, r: KeyRoundsRequest): Promise<number | null> {
    return sqliteKeyRounds(tx, r);
  }

  async insertMany<T extends BulkTable>(tx: Tx, table: T, rows: Array<Insertable<DB[T]>>): Promise<void> {
    for (let i = 0; i < rows.length;) {
      // A turn of the event loop between chunks: a chunk of rows, or of large payloads, is a long
      // step on its own (longer the first time in a process, with its statement's preparation),
      // all of it holding the loop. The transaction stays open meanwhile
      // and keeps the connection: every other statement on it waits for the commit (Kysely's
      // connection mutex), so nothing reads these rows before they are committed; requests, the
      // reader thread's and the other connections' work go on.
      if (i > 0) await nextTurn();
      const end = bulkChunkEnd(rows, i, BULK_CHUNK);
      const chunk = rows.slice(i, end);
      i = end;
      const cols = bulkColumns(chunk);
      await tx
        .insertInto(table)
        .values(chunk.map((r) => Object.fromEntries(cols.map((c) => [c, (r as Record<string, unknown>)[c] ?? null]))) as never)
        .execute();
    }
  }

  jsonElements(json: string): RawBuilder<unknown> {
    return sql`json_each(${json})`;
  }

  publish(topic: Topic, message: string): void {
    this.signals.deliver(topic, message);
  }

  subscribe(topic: Topic, listener: (message: string, local: boolean) => void): () => void {
    return this.signals.on(topic, listener);
  }

  migrate(): Promise<number[]> {
    return this.db.connection().execute(async () => migrateSqlite(this.raw, this.file));
  }

  async migrationStatus(): Promise<{ applied: number[]; known: number[] }> {
    return sqliteMigrationStatus(this.raw);
  }

  async missingSetup(): Promise<string | undefined> {
    return undefined;
  }

  async settingChecks(): Promise<StoreCheck[]> {
    return [];
  }

  async close(): Promise<void> {
    this.background?.stop();
    await this.groups.close();
    await this.background?.settled();
    this.signals.clear();
    if (this.reader !== this.db) await this.reader.destroy();
    await this.writerThread?.db.destroy();
    await this.db.destroy();
    this.lock?.release();
  }
}
