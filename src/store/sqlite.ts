import { closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { Kysely, SqliteDialect, sql, type Driver, type SelectQueryBuilder, type SqliteStatement } from 'kysely';
import { BULK_CHUNK, bulkColumns, inOrderOn, type InOrder, type StoreAdapter, type Tx } from './adapter.ts';
import type { DB } from './schema.ts';
import { LocalSignals } from './signals.ts';
import { GROUP_LIMITS, GroupCommit, type GroupCommitStats, type GroupLimits } from './sqlite-group-commit.ts';
import { SqliteLiteralLimitCompiler } from './sqlite-compiler.ts';
import { preparedQuery } from './prepared-query.ts';
import { openSqliteReader, openSqliteWriterThread } from './sqlite-reader.ts';
import { lockSqliteStore, type StoreLock } from './sqlite-lock.ts';
import { migrateSqlite, sqliteMigrationStatus } from './sqlite-migrate.ts';
import { rowsAsObjects } from './sqlite-rows.ts';

/**
 * The writer's automatic checkpoint while the pruner sweeps (adapter.ts, sweepCheckpoints): a
 * backstop only — it runs inside a commit on the event loop. The pruner checkpoints on its own
 * thread about every PRUNE_CHECKPOINT_FRAMES frames, and those checkpoints keep up (they copy every
 * frame), but the WAL starts over only when a writer begins while no reader still uses it, and
 * with requests reading and writing beside the batches it often does not: in a sweep of 500,000
 * executions at 1M under a submit → claim → complete every ~40 ms the WAL grew to 24,000–29,500
 * frames between two restarts. At 25,000 the backstop then ran every second or so, 100–150 ms on
 * the event loop each time (docs/benchmarks.md, "The WAL's backstop"); at 10,000 it tripped even
 * under lighter load. So the bound is 400 MiB of 4 KiB pages: reached only if the pruner's steps stop.
 */
export const SWEEP_AUTOCHECKPOINT_PAGES = 100_000;

/**
 * The writer connection's automatic checkpoint, a backstop (pages of 4 KiB): checkpoints run on the
 * pruner's worker thread instead (BACKGROUND_CHECKPOINT_MS), where copying pages back into the
 * database file and syncing it holds nothing but that thread. SQLite's default, 1,000, runs the
 * checkpoint inside the commit that takes the WAL past it, on the event loop: 40–55 % of the time
 * W1 spent in COMMIT (docs/benchmarks.md). Reached only if the background checkpoints stop, or while
 * a long read holds the WAL open (then there is little left for it to copy: the thread copied up to
 * the reader's snapshot already).
 */
export const WRITER_AUTOCHECKPOINT_PAGES = 40_000;
/** How often the worker thread checkpoints the WAL, when something was committed since the last time. */
export const BACKGROUND_CHECKPOINT_MS = 100;
/**
 * The WAL length (frames) at which a background checkpoint also lets the WAL start over. SQLite
 * starts it over only when a writer begins with every frame copied, and under steady writes the
 * thread's checkpoint never gets there: the main connection commits new frames while it copies. So
 * past this length a second checkpoint copies the rest while it holds the main connection's turn
 * (groups wait asynchronously; the event loop goes on), and the next group's first write starts the
 * WAL over. Without it the WAL grew to the writer's backstop, whose checkpoint then ran inside a
 * commit on the event loop, with its two fsyncs (docs/benchmarks.md, "The WAL started over off the
 * event loop").
 */
export const WAL_RESTART_FRAMES = 16_000;

/** holdForNewWork of one agent (a submit's), built once: BEGIN IMMEDIATE already holds every writer off. */
const holdOne = preparedQuery((tx: Tx, p: { name: string }) => tx.selectFrom('agents').selectAll().where('name', '=', p.name));

/** Group-commit counters per open SQLite store (see commitStats). */
const groupCommits = new WeakMap<StoreAdapter, GroupCommit>();

/** What group commit has done on this store; undefined for a store that is not SQLite. */
export function commitStats(store: StoreAdapter): Readonly<GroupCommitStats> | undefined {
  return groupCommits.get(store)?.stats;
}

/** Background checkpoints per open SQLite store (see checkpointStats). */
const checkpointers = new WeakMap<StoreAdapter, CheckpointStats>();

/** What the background checkpoints have done since the store opened. */
export interface CheckpointStats {
  /** Checkpoints run on the worker thread because something was committed. */
  runs: number;
  /** The WAL's length in frames at the last of them. */
  lastFrames: number;
  /** Of those, the ones that held the main connection's turn to copy the rest (WAL_RESTART_FRAMES). */
  held: number;
}

/** Background checkpoints of this store; undefined for a store without them (in-memory, PostgreSQL). */
export function checkpointStats(store: StoreAdapter): Readonly<CheckpointStats> | undefined {
  return checkpointers.get(store);
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

/** A SQLite bulk insert's chunk ends at BULK_CHUNK rows, or after the row that brings its text values to this many characters. */
const BULK_CHUNK_CHARS = 1 << 20;
const textChars = (row: Record<string, unknown>) => {
  let n = 0;
  for (const k in row) {
    const v = row[k];
    if (typeof v === 'string') n += v.length;
  }
  return n;
};

export function openSqlite(file: string, opts: SqliteOptions = {}): StoreAdapter {
  if (file !== ':memory:') createPrivately(file);
  const lock = opts.serve && file !== ':memory:' ? lockSqliteStore(file) : undefined;
  try {
    return openLocked(file, opts, lock);
  } catch (err) {
    // Not a database, a read-only directory…: the next open in this process may take the lock.
    lock?.release();
    throw err;
  }
}

function openLocked(file: string, opts: SqliteOptions, lock: StoreLock | undefined): StoreAdapter {
  const raw = new Database(file);
  // Pages freed by the pruner go back to the file in small steps (PRAGMA incremental_vacuum).
  // It can only be switched on in a new file, before anything is written to it (switching to WAL
  // writes its header), or later by a VACUUM: see migrateSqlite().
  if (!raw.prepare('SELECT 1 FROM sqlite_master LIMIT 1').get()) raw.pragma('auto_vacuum = INCREMENTAL');
  raw.pragma('journal_mode = WAL');
  // NORMAL in WAL mode survives a process crash (SIGKILL); only an OS crash can lose the
  // last transactions. FULL would fsync every commit and cost most of the throughput.
  raw.pragma('synchronous = NORMAL');
  // Another process (the CLI running `migrate`, a second `baton up`) may hold the write lock.
  raw.pragma('busy_timeout = 5000');
  raw.pragma('foreign_keys = ON');
  // The scratch b-trees a statement makes (RETURNING's rows, an IN (subquery), a sort) in memory.
  // In a file (SQLite's default here), each such statement allocated and freed a temporary pager's
  // memory, and where that block sat at the top of the heap glibc gave it back to the system at
  // every free and faulted it in again at the next statement: in-process W1 spent ~110 µs per claim
  // on it (docs/benchmarks.md, "temp_store"). Large reads run on the reader thread, not here.
  raw.pragma('temp_store = MEMORY');
  forgetValueSamples(raw);
  // Kysely prepares every statement anew; better-sqlite3 statements are reusable, and the
  // engine issues the same few dozen SQL strings, so keep them prepared. (A micro-benchmark of
  // Kysely insert+select pairs ran about twice as fast with the cache on this machine.)
  const prepared = new Map<string, SqliteStatement>();
  const schemaCookie = raw.prepare('PRAGMA schema_version').pluck();
  const schemaVersion = () => schemaCookie.get() as number;
  const database = {
    prepare(text: string) {
      let stmt = prepared.get(text);
      if (!stmt) {
        if (prepared.size >= 1000) prepared.clear();
        stmt = rowsAsObjects(raw.prepare(text), schemaVersion);
        prepared.set(text, stmt);
      }
      return stmt;
    },
    close: () => raw.close(),
  };
  const dialect = new WatchedSqliteDialect({ database });
  const db = new Kysely<DB>({ dialect });
  // One process per SQLite file, so in-process delivery reaches every subscriber.
  const signals = new LocalSignals();

  // Long reads (canary, metrics, stats, exports) run on a second, read-only connection in a
  // worker thread; an in-memory database cannot be opened twice, so it reads on `db`.
  const reader = file === ':memory:' ? db : openSqliteReader(file);
  // The pruner's deletes and WAL checkpoints run on a read-write connection in a worker thread of
  // their own (pruneTransaction, checkpoint); an in-memory database has only `db`.
  const writerThread = file === ':memory:' ? undefined : openSqliteWriterThread(file);
  const pruneWriter = writerThread?.db;

  async function inTransaction<T>(handle: Kysely<DB>, begin: string, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return handle.connection().execute(async (conn) => {
      await sql.raw(begin).execute(conn);
      try {
        const out = await fn(conn as Tx);
        await sql.raw('COMMIT').execute(conn);
        return out;
      } catch (err) {
        // The main connection knows whether a transaction is open; the reader's BEGIN is
        // deferred and read-only, so a ROLLBACK there can only fail harmlessly.
        if (handle !== db || raw.inTransaction)
          await sql
            .raw('ROLLBACK')
            .execute(conn)
            .catch(() => undefined);
        throw err;
      }
    });
  }

  const groups = new GroupCommit(db, raw, { ...GROUP_LIMITS, ...opts.groupLimits });
  /** The automatic checkpoint found when a prune sweep set it aside (undefined: no sweep holds it). */
  let savedAutoCheckpoint: number | undefined;
  // Checkpoints off the event loop (WRITER_AUTOCHECKPOINT_PAGES): each pass, if anything was
  // committed since the last, runs a PASSIVE checkpoint on the worker thread (backgroundCheckpoint).
  const checkpoints: CheckpointStats = { runs: 0, lastFrames: 0, held: 0 };
  let checkpointing: Promise<void> | undefined;
  let committedAtLastCheckpoint = 0;
  /** Transactions committed on the writer thread by offLoopTransaction (for the checkpoint timer). */
  let offLoopCommits = 0;
  const checkpointEveryMs = opts.checkpointEveryMs ?? BACKGROUND_CHECKPOINT_MS;
  const background = writerThread !== undefined && checkpointEveryMs > 0;
  const checkpointTimer = background
    ? setInterval(() => {
        // A prune sweep checkpoints in its own pauses (sweepCheckpoints): one here would make its
        // next batch, which holds the main connection's turn, wait for the thread.
        const commits = groups.stats.commits + offLoopCommits;
        if (checkpointing || savedAutoCheckpoint !== undefined || commits === committedAtLastCheckpoint) return;
        committedAtLastCheckpoint = commits;
        checkpointing = backgroundCheckpoint()
          .then((frames) => {
            checkpoints.runs++;
            checkpoints.lastFrames = frames;
          })
          // A failed checkpoint loses nothing (the WAL keeps the pages); the next pass tries again.
          .catch(() => undefined)
          .finally(() => (checkpointing = undefined));
      }, checkpointEveryMs).unref()
    : undefined;
  if (background) raw.pragma(`wal_autocheckpoint = ${WRITER_AUTOCHECKPOINT_PAGES}`);
  const walRestartFrames = opts.walRestartFrames ?? WAL_RESTART_FRAMES;
  /**
   * One pass of the timer; returns the WAL's length in frames. Past walRestartFrames the WAL should
   * start over, which needs every frame copied when a writer begins: catch up first without holding
   * anything (each pass copies what the writer committed during the one before), then copy the rest
   * holding the main connection's turn (WAL_RESTART_FRAMES).
   */
  async function backgroundCheckpoint(): Promise<number> {
    let log = await adapter.checkpoint();
    if (log < walRestartFrames) return log;
    // At most three more passes, while each finds a fair amount (256 frames, 1 MiB) added meanwhile.
    for (let pass = 0; pass < 3; pass++) {
      const next = await adapter.checkpoint();
      const added = next - log;
      log = next;
      if (added < 256) break;
    }
    checkpoints.held++;
    return db.connection().execute(() => adapter.checkpoint());
  }

  const adapter: StoreAdapter = {
    kind: 'sqlite',
    cteWrites: false,
    recentIndexes: false,
    lone: (statement) => statement(),
    db,
    // Write transactions that arrive in one event-loop turn share one COMMIT (sqlite-group-commit.ts).
    transaction: (fn) => groups.run(fn),
    // On the writer thread while this holds the main connection's turn, as a prune batch.
    offLoopTransaction: writerThread
      ? (fn) =>
          db.connection().execute(async () => {
            const out = await inTransaction(writerThread.db, 'BEGIN IMMEDIATE', fn);
            offLoopCommits++;
            return out;
          })
      : undefined,
    snapshot: (fn) => inTransaction(reader, 'BEGIN', fn),
    reader,
    pruneTransaction: (fn) => {
      const run = (handle: Kysely<DB>, inOrder?: InOrder) =>
        inTransaction(handle, 'BEGIN IMMEDIATE', async (tx) => {
          await sql`UPDATE retention_state SET pruning = 1 WHERE id = 'retention'`.execute(tx);
          const out = await fn(tx, () => dialect.waiting > 0, inOrder ?? inOrderOn(tx));
          await sql`UPDATE retention_state SET pruning = 0 WHERE id = 'retention'`.execute(tx);
          return out;
        });
      // The batch runs on the writer thread while this holds the main connection's turn: nothing
      // on `db` (which would wait for the write lock inside better-sqlite3, on the event loop)
      // runs meanwhile; it waits its turn asynchronously, and its wait is what `contended` sees.
      return writerThread ? db.connection().execute(() => run(writerThread.db, writerThread.inOrder)) : run(db);
    },
    reclaimSpace: (pages) =>
      // On the pruner's thread while this holds the main connection's turn, as a prune batch: the
      // step and its commit (and, with the writer's automatic checkpoint back, the checkpoint that
      // commit would run) measured 50–110 ms on the event loop after a prune of 500,000 executions.
      // In-memory: on the raw handle. Either way pragma() steps the statement to the end (each
      // step frees one page).
      db.connection().execute(async () => {
        const step = `incremental_vacuum(${Math.max(1, Math.floor(pages))})`;
        if (!pruneWriter) {
          raw.pragma(step);
          return Number(raw.pragma('freelist_count', { simple: true }));
        }
        await sql.raw(`PRAGMA ${step}`).execute(pruneWriter);
        const { rows } = await sql<{ freelist_count: number }>`PRAGMA freelist_count`.execute(pruneWriter);
        return Number(rows[0]?.freelist_count ?? 0);
      }),
    sweepCheckpoints: (manual) =>
      db.connection().execute(async () => {
        if (manual && savedAutoCheckpoint === undefined) {
          savedAutoCheckpoint = Number(raw.pragma('wal_autocheckpoint', { simple: true }));
          raw.pragma(`wal_autocheckpoint = ${SWEEP_AUTOCHECKPOINT_PAGES}`);
        } else if (!manual && savedAutoCheckpoint !== undefined) {
          raw.pragma(`wal_autocheckpoint = ${savedAutoCheckpoint}`);
          savedAutoCheckpoint = undefined;
        }
      }),
    checkpoint: async () => {
      // On the writer thread, outside any transaction, without the main connection's turn: a
      // PASSIVE checkpoint takes no write lock, so writers on `db` go on while it copies and syncs.
      // (In-memory: there is no WAL.)
      if (!pruneWriter) return 0;
      const { rows } = await sql<{ log: number }>`PRAGMA wal_checkpoint(PASSIVE)`.execute(pruneWriter);
      return Number(rows[0]?.log ?? 0);
    },
    lockRows<QB extends SelectQueryBuilder<any, any, any>>(qb: QB): QB {
      return qb; // BEGIN IMMEDIATE already excludes every other writer.
    },
    holdForNewWork: (tx, names) =>
      names.length === 1
        ? holdOne(tx, { name: names[0]! })
        : tx.selectFrom('agents').selectAll().where('name', 'in', names).orderBy('name').execute(),
    async insertMany(tx, table, rows) {
      for (let i = 0; i < rows.length;) {
        // A turn of the event loop between chunks: 1,000 rows took 20-50 ms on this kind of machine
        // (the first time in a process more, with its statement's preparation), and 33 payloads of
        // 243 KiB about as long, all of it holding the loop. The transaction stays open meanwhile
        // and keeps the connection: every other statement on it waits for the commit (Kysely's
        // connection mutex), so nothing reads these rows before they are committed; requests, the
        // reader thread's and the other connections' work go on.
        if (i > 0) await nextTurn();
        let end = i;
        for (let chars = 0; end < rows.length && end - i < BULK_CHUNK && chars < BULK_CHUNK_CHARS; end++)
          chars += textChars(rows[end] as Record<string, unknown>);
        const chunk = rows.slice(i, end);
        i = end;
        const cols = bulkColumns(chunk);
        await tx
          .insertInto(table)
          .values(chunk.map((r) => Object.fromEntries(cols.map((c) => [c, (r as Record<string, unknown>)[c] ?? null]))) as never)
          .execute();
      }
    },
    jsonElements: (json) => sql`json_each(${json})`,
    publish: (topic, message) => signals.deliver(topic, message),
    subscribe: (topic, listener) => signals.on(topic, listener),
    async migrate() {
      return db.connection().execute(async () => migrateSqlite(raw, file));
    },
    async migrationStatus() {
      return sqliteMigrationStatus(raw);
    },
    async close() {
      clearInterval(checkpointTimer);
      await groups.close();
      await checkpointing;
      signals.clear();
      if (reader !== db) await reader.destroy();
      await pruneWriter?.destroy();
      await db.destroy();
      lock?.release();
    },
  };
  groupCommits.set(adapter, groups);
  if (background) checkpointers.set(adapter, checkpoints);
  return adapter;
}

/**
 * Kysely's SQLite dialect, counting the callers waiting for the connection's turn (one
 * connection, taken by one transaction or statement at a time): a prune batch on the writer
 * thread, which holds that turn, gives it up early when someone waits (pruneTransaction).
 */
class WatchedSqliteDialect extends SqliteDialect {
  waiting = 0;
  override createQueryCompiler() {
    return new SqliteLiteralLimitCompiler();
  }
  override createDriver(): Driver {
    const driver = super.createDriver();
    const acquire = driver.acquireConnection.bind(driver);
    driver.acquireConnection = async () => {
      this.waiting++;
      try {
        return await acquire();
      } finally {
        this.waiting--;
      }
    };
    return driver;
  }
}

/**
 * Drop the per-value samples an `ANALYZE` (or `PRAGMA optimize`) run by hand leaves in
 * sqlite_stat4, before any connection plans with them; the per-index row counts in sqlite_stat1
 * stay. better-sqlite3 builds SQLite with STAT4, and with samples present the planner reads the
 * bound value of every indexed term (`agent = ?`, `execution_id = ?`), so each such statement is
 * prepared again on every run: measured at 1M history, one execution with its timeline took 0.20
 * ms in-process with the samples and 0.12 ms without, an admission count 10.8 µs against 2.6 µs.
 * Baton's statements are each made for one index, so the samples buy no better plan. A read-only
 * file, or another process holding the write lock past the busy timeout, leaves them (slower, not
 * wrong).
 */
function forgetValueSamples(raw: Database.Database): void {
  try {
    if (!raw.prepare("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat4'").get()) return;
    if (!raw.prepare('SELECT 1 FROM sqlite_stat4 LIMIT 1').get()) return;
    raw.exec('DELETE FROM sqlite_stat4');
    // Reloads the statistics into this connection (the others open after this).
    raw.exec('ANALYZE sqlite_schema');
  } catch {
    // See above: the samples stay.
  }
}

/**
 * The database holds payloads, results, logs and push URLs: its directory is created 0700 and the
 * file 0600 before SQLite opens it. SQLite gives the -wal and -shm files it creates the mode of the
 * database file, so they are 0600 too. Existing files keep their mode (`baton doctor` warns when
 * it is looser).
 */
function createPrivately(file: string): void {
  const dir = dirname(file);
  if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (!existsSync(file)) closeSync(openSync(file, 'a', 0o600));
}
