import { Worker } from 'node:worker_threads';
import {
  CompiledQuery,
  Kysely,
  SqliteAdapter,
  SqliteIntrospector,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type QueryResult,
} from 'kysely';
import type { DB } from './schema.ts';
import { SqliteLiteralLimitCompiler } from './sqlite-compiler.ts';
import { ThreadCalls } from './thread-calls.ts';

/**
 * A read-only SQLite connection in a worker thread, as a Kysely handle. better-sqlite3 is
 * synchronous: a long read on the main connection holds the event loop (every request,
 * heartbeat and claim waits). Here the statement runs on the worker's thread and the main
 * thread only receives its rows; WAL lets this connection read beside the writer. One
 * connection, so statements and snapshots (BEGIN … COMMIT) take turns, as in Kysely's own
 * SQLite driver. The thread starts on the first query.
 */
export function openSqliteReader(file: string, opts: { busyTimeoutMs?: number } = {}): Kysely<DB> {
  return new Kysely<DB>({ dialect: new WorkerSqliteDialect(file, true, opts.busyTimeoutMs ?? 5000) });
}

/**
 * A read-write connection in a worker thread (the pruner's deletes and WAL checkpoints: long
 * writes that would otherwise hold the event loop). SQLite still has one writer: the caller
 * keeps the main connection from writing meanwhile (sqlite.ts holds its turn), because a main
 * connection waiting for this one's lock would wait inside better-sqlite3, on the event loop.
 * Foreign keys on, synchronous=NORMAL like the main connection; no automatic checkpoint (its
 * caller checkpoints between transactions, when no other writer waits on this one's commit).
 */
export function openSqliteWriterThread(file: string, opts: { busyTimeoutMs?: number } = {}): SqliteWriterThread {
  const dialect = new WorkerSqliteDialect(file, false, opts.busyTimeoutMs ?? 5000);
  const db = new Kysely<DB>({ dialect });
  return { db, inOrder: (queries) => dialect.driver!.executeInOrder(queries) };
}

export interface SqliteWriterThread {
  db: Kysely<DB>;
  /**
   * Compiled statements run one after another on the thread, sent as one message: one round trip
   * instead of one per statement (a Kysely connection runs one query at a time). The first that
   * fails fails the call, and the rest do not run. Only while the caller holds `db`'s connection
   * (inside a transaction on it), so that nothing else runs on the thread between them.
   */
  inOrder(queries: readonly CompiledQuery[]): Promise<QueryResult<unknown>[]>;
}

class WorkerSqliteDialect implements Dialect {
  driver: WorkerSqliteDriver | undefined;
  constructor(
    private readonly file: string,
    private readonly readonly: boolean,
    private readonly busyTimeoutMs: number,
  ) {}
  createDriver(): Driver {
    this.driver = new WorkerSqliteDriver(this.file, this.readonly, this.busyTimeoutMs);
    return this.driver;
  }
  createQueryCompiler() {
    return new SqliteLiteralLimitCompiler();
  }
  createAdapter() {
    return new SqliteAdapter();
  }
  createIntrospector(db: Kysely<any>) {
    return new SqliteIntrospector(db);
  }
}

interface Result {
  rows?: unknown[];
  changes?: number;
}

interface Reply extends Result {
  id: number;
  /** Statements sent together, in order. */
  results?: Result[];
  error?: { message: string; code?: string };
}

const queryResult = <R>(r: Result): QueryResult<R> => ({
  rows: (r.rows ?? []) as R[],
  numAffectedRows: r.changes === undefined ? undefined : BigInt(r.changes),
});

class WorkerSqliteDriver implements Driver {
  private readonly calls: ThreadCalls<Reply>;
  private lock: Promise<void> = Promise.resolve();
  private readonly connection: DatabaseConnection;

  constructor(file: string, readonly: boolean, busyTimeoutMs: number) {
    this.calls = new ThreadCalls<Reply>(
      () => new Worker(new URL('./sqlite-reader-worker.js', import.meta.url), { workerData: { file, readonly, busyTimeoutMs } }),
      `SQLite ${readonly ? 'reader' : 'writer'} thread`,
    );
    this.connection = {
      executeQuery: <R>(q: CompiledQuery) => this.execute<R>(q),
      streamQuery: () => {
        throw new Error('a SQLite worker thread does not stream; read in keyset chunks');
      },
    };
  }

  /** The thread starts on the first query. */
  async init(): Promise<void> {}

  private async execute<R>(q: CompiledQuery): Promise<QueryResult<R>> {
    return queryResult<R>(await this.send({ sql: q.sql, parameters: q.parameters }));
  }

  async executeInOrder(queries: readonly CompiledQuery[]): Promise<QueryResult<unknown>[]> {
    const reply = await this.send({ batch: queries.map((q) => ({ sql: q.sql, parameters: q.parameters })) });
    return (reply.results ?? []).map((r) => queryResult(r));
  }

  private async send(message: object): Promise<Reply> {
    const reply = await this.calls.call(message);
    if (reply.error) throw Object.assign(new Error(reply.error.message), { code: reply.error.code });
    return reply;
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    let release!: () => void;
    const previous = this.lock;
    this.lock = new Promise<void>((r) => (release = r));
    await previous;
    this.releaseCurrent = release;
    return this.connection;
  }
  private releaseCurrent: (() => void) | undefined;

  async releaseConnection(): Promise<void> {
    const release = this.releaseCurrent;
    this.releaseCurrent = undefined;
    release?.();
  }

  async beginTransaction(conn: DatabaseConnection): Promise<void> {
    await conn.executeQuery(CompiledQuery.raw('BEGIN'));
  }
  async commitTransaction(conn: DatabaseConnection): Promise<void> {
    await conn.executeQuery(CompiledQuery.raw('COMMIT'));
  }
  async rollbackTransaction(conn: DatabaseConnection): Promise<void> {
    await conn.executeQuery(CompiledQuery.raw('ROLLBACK'));
  }

  async destroy(): Promise<void> {
    await this.calls.terminate();
  }
}
