/**
 * The main SQLite connection of a store (sqlite.ts): opening the file with Baton's settings, the
 * statement cache Kysely runs through, the dialect that counts who waits for the connection, and
 * migrations.
 */
import { closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { Kysely, SqliteDialect, type DatabaseConnection, type Driver, type SqliteDatabase, type SqliteStatement } from 'kysely';
import { runsAtOnce } from './prepared-query.ts';
import type { DB } from './schema.ts';
import { SqliteLiteralLimitCompiler } from './sqlite-compiler.ts';
import { rowsAsObjects } from './sqlite-rows.ts';

/** Open `file` (made private first) with the pragmas every main connection runs under. */
export function openMainConnection(file: string): Database.Database {
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
  // every free and faulted it in again at the next statement, a large share of a claim's cost.
  // Large reads run on the reader thread, not here.
  raw.pragma('temp_store = MEMORY');
  forgetValueSamples(raw);
  return raw;
}

/**
 * `raw` as Kysely's SQLite dialect sees a database. Kysely prepares every statement anew;
 * better-sqlite3 statements are reusable, and the engine issues the same few dozen SQL strings, so
 * keep them prepared. (A micro-benchmark of Kysely insert+select pairs ran about twice as fast
 * with the cache on this machine.)
 */
export function cachedStatements(raw: Database.Database, schema = new SchemaCookie(raw)): SqliteDatabase {
  const prepared = new Map<string, SqliteStatement>();
  const schemaVersion = () => schema.read();
  return {
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
}

/**
 * The connection's schema cookie (PRAGMA schema_version), which rowsAsObjects (sqlite-rows.ts)
 * compares after each run of a statement that takes its columns from the tables. While a group
 * commit holds BEGIN IMMEDIATE no other connection can change the schema (that takes the write
 * lock) and the group's members run no DDL, so the cookie read once at its BEGIN (pin) stands for
 * every statement of the group: a task's transactions ran the PRAGMA about seven times. Outside a
 * pinned transaction each read asks SQLite.
 */
export class SchemaCookie {
  private readonly cookie: Database.Statement;
  private pinned: number | undefined;
  constructor(private readonly raw: Database.Database) {
    this.cookie = raw.prepare('PRAGMA schema_version').pluck();
  }
  read(): number {
    if (this.pinned !== undefined && this.raw.inTransaction) return this.pinned;
    return this.cookie.get() as number;
  }
  /** Call just after BEGIN IMMEDIATE: the cookie now holds until unpin. */
  pin(): void {
    this.pinned = this.cookie.get() as number;
  }
  /** Call as the transaction ends (COMMIT, ROLLBACK, or SQLite ending it itself). */
  unpin(): void {
    this.pinned = undefined;
  }
}

/**
 * Kysely's SQLite dialect, counting the callers waiting for the connection's turn (one
 * connection, taken by one transaction or statement at a time): a prune batch on the writer
 * thread, which holds that turn, gives it up early when someone waits (pruneTransaction).
 */
export class WatchedSqliteDialect extends SqliteDialect {
  waiting = 0;
  /** The driver Kysely made, and its one connection once first taken (for heldHandle). */
  driver: Driver | undefined;
  connection: DatabaseConnection | undefined;
  override createQueryCompiler() {
    return new SqliteLiteralLimitCompiler();
  }
  override createDriver(): Driver {
    const driver = super.createDriver();
    const acquire = driver.acquireConnection.bind(driver);
    driver.acquireConnection = async () => {
      this.waiting++;
      try {
        return (this.connection = await acquire());
      } finally {
        this.waiting--;
      }
    };
    this.driver = driver;
    return driver;
  }
}

/**
 * A handle on the main connection for code that already holds the connection's turn (the
 * transactions of a group commit, sqlite-group-commit.ts): each statement runs at once, when it
 * is called, instead of queueing for the turn again behind a promise chain (Kysely's
 * single-connection mutex) that cost a hot transaction more than some of its statements. The
 * statements still run one at a time and in the order they are called, since better-sqlite3 runs
 * each synchronously; a prepared statement (prepared-query.ts) runs straight on its cached
 * better-sqlite3 statement. Use it only while holding the turn: call it after
 * `db.connection().execute` has begun, and never after that callback ends.
 */
export function heldHandle(dialect: WatchedSqliteDialect, statements: SqliteDatabase, executorOf: Kysely<DB>): Kysely<DB> {
  const connection = dialect.connection;
  if (!connection || !dialect.driver) throw new Error('heldHandle: the connection has not been taken yet');
  const executor = executorOf.getExecutor().withConnectionProvider({ provideConnection: (consume) => consume(connection) });
  const held = new Kysely<DB>({ config: { dialect }, dialect, driver: dialect.driver, executor });
  runsAtOnce(held, (text, parameters) => {
    const stmt = statements.prepare(text);
    if (stmt.reader) return stmt.all(parameters) as unknown[];
    stmt.run(parameters);
    return [];
  });
  return held;
}

/**
 * Drop the per-value samples an `ANALYZE` (or `PRAGMA optimize`) run by hand leaves in
 * sqlite_stat4, before any connection plans with them; the per-index row counts in sqlite_stat1
 * stay. better-sqlite3 builds SQLite with STAT4, and with samples present the planner reads the
 * bound value of every indexed term (`agent = ?`, `execution_id = ?`), so each such statement is
 * prepared again on every run, which made reads such as an execution with its timeline or an
 * admission count several times as costly.
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
export function createPrivately(file: string): void {
  const dir = dirname(file);
  if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (!existsSync(file)) closeSync(openSync(file, 'a', 0o600));
}
