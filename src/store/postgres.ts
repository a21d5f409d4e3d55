import type pg from 'pg';
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
  type LockMode,
  type StoreAdapter,
  type StoreCheck,
  type StoreKind,
  type KeyRoundsRequest,
  type Tx,
} from './adapter.ts';
import { postgresKeyRounds } from './key-rounds.ts';
import type { FastPaths } from './fast-paths.ts';
import { historySizePostgres, type HistorySize } from './history-size.ts';
import { migrationPlan, migrationStatusOf, MIGRATIONS_TABLE_SQL } from './migrations.ts';
import { checkAutovacuum, missingSchema } from './postgres-checks.ts';
import { DatabaseClock } from './postgres-clock.ts';
import { clientFor, openPool, PipelinedBeginDialect, retryConflicts, sessionOptions } from './postgres-connection.ts';
import { postgresFastPaths } from './postgres-fast-paths.ts';
import { PostgresSignals } from './postgres-signals.ts';
import { deleteChainsPostgres, PRUNE_BATCH } from './prune-deletes.ts';
import type { AgentRow, DB } from './schema.ts';
import type { Topic } from './signals.ts';

export { RETRYABLE_SQLSTATES } from './postgres-connection.ts';
export { channelName } from './postgres-signals.ts';

/**
 * JSON.stringify's replacer for JSON that PostgreSQL parses: a lone surrogate (no character; the
 * API refuses one in text, but a template may render one from a worker's JSON) becomes U+FFFD, as
 * the driver writes it in a plain parameter. JSON.stringify would write it as \ud800, which
 * PostgreSQL's JSON parser refuses, failing the whole statement.
 */
const LONE_SURROGATE_ESCAPE = /\\ud[89a-f]/i;
const wellFormed = (_key: string, v: unknown) => (typeof v === 'string' ? (v as string & { toWellFormed(): string }).toWellFormed() : v);

/** Arbitrary constant key for the migration advisory lock ("baton" in ASCII). */
const MIGRATION_LOCK_KEY = 0x626174_6f6e;

export interface PostgresOptions {
  url: string;
  /** Schema to use (created if missing). Tests give each file its own. Default: public. */
  schema?: string;
  /** Pool size per process. Default 10: enough for 50 claim loops, small enough for many processes. */
  poolMax?: number;
  /** Send repeated parameterised statements as named prepared statements (postgres-connection.ts). Default true. */
  namedStatements?: boolean;
  /**
   * Run the hot transitions as their SQL functions where the facts allow (StoreAdapter.fastPaths).
   * Default true; false runs every transition in the engine's transaction, as on SQLite (a test
   * compares the two).
   */
  fastPaths?: boolean;
  /**
   * The process clock that `now()` adds the measured offset to (postgres-clock.ts). Default: the
   * process's monotonic clock. A test gives a skewed one to stand for a process whose clock is wrong.
   */
  processClock?: () => number;
}

export function openPostgres(opts: PostgresOptions): StoreAdapter {
  return new PostgresStore(opts);
}

/** Shared store: PostgreSQL, for any number of `baton` processes. */
class PostgresStore implements StoreAdapter {
  readonly kind: StoreKind = 'postgres';
  readonly cteWrites = true;
  readonly sharedByProcesses = true;
  readonly createdOrderIndexes = true;
  // Autovacuum reclaims dead rows in place (docs/operations.md); its checkpointer is a process of its own.
  readonly pruneUpkeep = false;
  readonly pruneBatch = PRUNE_BATCH.postgres;
  readonly db: Kysely<DB>;
  /** The pool, as `db`: the database does the work of long reads; Node only waits. */
  readonly reader: Kysely<DB>;

  private readonly schema: string | undefined;
  private readonly pool: pg.Pool;
  private readonly signals: PostgresSignals;
  private schemaReady: Promise<void> | undefined;
  private readonly fastPathsOn: boolean;
  private readonly clock: DatabaseClock;

  constructor(opts: PostgresOptions) {
    const schema = opts.schema;
    if (schema && !/^[a-z_][a-z0-9_]*$/.test(schema)) throw new Error(`invalid schema name '${schema}'`);
    this.schema = schema;
    const options = sessionOptions(schema);
    // Several hosts in the URL: each connection goes to the one taking writes (postgres-hosts.ts).
    const { url, Client } = clientFor(opts.url, options);
    this.pool = openPool({ url, options, poolMax: opts.poolMax, namedStatements: opts.namedStatements, Client });
    this.db = new Kysely<DB>({ dialect: new PipelinedBeginDialect({ pool: this.pool }) });
    this.reader = this.db;
    this.fastPathsOn = opts.fastPaths !== false;
    this.signals = new PostgresSignals(this.pool, { url, options, schema, Client });
    this.clock = new DatabaseClock(this.pool, opts.processClock);
    bindMethods(this);
  }

  /** A getter over `this.db`, so a store wrapped around this one (a test counting statements) runs them through its own handle. */
  get fastPaths(): FastPaths | undefined {
    return this.fastPathsOn ? postgresFastPaths(this.db, retryConflicts) : undefined;
  }

  describe(): { kind: StoreKind } {
    return { kind: this.kind };
  }

  // The database's clock: every process on this database stamps and compares times on it.
  now(): number {
    return this.clock.now();
  }

  clockSkew(): { offsetMs: number; errorMs: number } {
    return this.clock.skew();
  }

  lone<T>(statement: () => Promise<T>): Promise<T> {
    return retryConflicts(statement);
  }

  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.withRetry('read committed', false, fn);
  }

  snapshot<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.withRetry('repeatable read', true, fn);
  }

  private withRetry<T>(isolation: 'read committed' | 'repeatable read', readOnly: boolean, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return retryConflicts(() => {
      let builder = this.db.transaction().setIsolationLevel(isolation);
      if (readOnly) builder = builder.setAccessMode('read only');
      return builder.execute((trx) => fn(trx as unknown as Tx));
    });
  }

  pruneTransaction<T>(fn: (tx: Tx, contended: () => boolean, inOrder: InOrder) => Promise<T>): Promise<T> {
    return this.withRetry('read committed', false, async (tx) => {
      await sql`SELECT set_config('baton.pruning', 'on', true)`.execute(tx);
      return fn(tx, () => false, inOrderOn(tx));
    });
  }

  deleteExecutionChains(tx: Tx, chains: readonly ExecutionChain[]) {
    return deleteChainsPostgres(tx, chains);
  }

  historySize<T extends string>(tables: readonly T[]): Promise<HistorySize<T>> {
    return historySizePostgres(this.reader, tables);
  }

  // Autovacuum makes dead rows' space reusable in place: nothing to hand back here.
  async reclaimSpace(): Promise<number> {
    return 0;
  }

  async sweepCheckpoints(): Promise<void> {}

  async checkpoint(): Promise<number> {
    return 0;
  }

  lockRows<QB extends SelectQueryBuilder<any, any, any>>(qb: QB, mode: LockMode): QB {
    switch (mode) {
      case 'wait':
        return qb.forUpdate() as QB;
      case 'skip':
        return qb.forNoKeyUpdate().skipLocked() as QB;
      case 'admission':
        return qb.forNoKeyUpdate() as QB;
      case 'existence':
        return qb.forKeyShare() as QB;
    }
  }

  async holdForNewWork(tx: Tx, names: readonly string[]): Promise<AgentRow[]> {
    // The rows locked in name order (a materialised CTE), then each turn taken in that order as
    // the rows are read out: callers holding several agents never wait on each other in a cycle.
    const rows = await tx
      .with('held', (db) => db.selectFrom('agents').selectAll().where('name', 'in', names).orderBy('name').forKeyShare())
      .selectFrom('held')
      .selectAll()
      .select(sql<null>`pg_advisory_xact_lock(hashtext('new-work:' || held.name))`.as('_turn'))
      .orderBy('name')
      .execute();
    return rows.map(({ _turn, ...row }) => row);
  }

  keyRounds(tx: Tx, r: KeyRoundsRequest): Promise<number | null> {
    return postgresKeyRounds(tx, r);
  }

  async insertMany<T extends BulkTable>(tx: Tx, table: T, rows: Array<Insertable<DB[T]>>): Promise<void> {
    // One JSON value has no parameter limit: more rows a statement, fewer round trips; as many
    // characters as SQLite's (bulkChunkEnd), each statement's text being serialised on the event loop.
    for (let i = 0; i < rows.length;) {
      const end = bulkChunkEnd(rows, i, 5 * BULK_CHUNK);
      const chunk = rows.slice(i, end);
      i = end;
      const cols = sql.join(bulkColumns(chunk).map((c) => sql.ref(c)));
      // (The replacer only when the text shows a lone surrogate's escape: it costs a call per value.)
      const plain = JSON.stringify(chunk);
      const json = LONE_SURROGATE_ESCAPE.test(plain) ? JSON.stringify(chunk, wellFormed) : plain;
      await sql`INSERT INTO ${sql.table(table)} (${cols}) SELECT ${cols} FROM json_populate_recordset(NULL::${sql.table(table)}, ${json})`.execute(
        tx,
      );
    }
  }

  jsonElements(json: string): RawBuilder<unknown> {
    return sql`json_array_elements(${json}::json)`;
  }

  publish(topic: Topic, message: string): void {
    this.signals.publish(topic, message);
  }

  subscribe(topic: Topic, fn: (message: string, local: boolean) => void): () => void {
    return this.signals.subscribe(topic, fn);
  }

  private ensureSchema(): Promise<void> {
    const schema = this.schema;
    if (!schema) return Promise.resolve();
    this.schemaReady ??= this.pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`).then(
      () => undefined,
      (err) => {
        // Two processes racing to create the schema: the loser sees a unique violation.
        if (err.code !== '23505' && err.code !== '42P06') throw err;
      },
    );
    return this.schemaReady;
  }

  async migrate(): Promise<number[]> {
    // Every server migrates before it serves: its first stamped time is on the database's clock.
    await this.clock.ready();
    await this.ensureSchema();
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      // Every process that starts at once queues here; the first applies, the rest find nothing to do.
      await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY]);
      await client.query(MIGRATIONS_TABLE_SQL);
      const done = new Set((await client.query('SELECT version FROM baton_migrations')).rows.map((r) => Number(r.version)));
      const applied: number[] = [];
      for (const { migration: m, run } of migrationPlan('postgres', done)) {
        if (run) await client.query(m.sql);
        await client.query('INSERT INTO baton_migrations (version, name, applied_at) VALUES ($1, $2, $3)', [m.version, m.name, this.now()]);
        applied.push(m.version);
      }
      await client.query('COMMIT');
      return applied;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  }

  async migrationStatus(): Promise<{ applied: number[]; known: number[] }> {
    // Read-only: with a schema that does not exist yet, to_regclass finds nothing.
    const exists = await this.pool.query("SELECT to_regclass('baton_migrations') AS t");
    const recorded = exists.rows[0].t
      ? (await this.pool.query('SELECT version FROM baton_migrations ORDER BY version')).rows.map((r) => Number(r.version))
      : [];
    return migrationStatusOf('postgres', recorded);
  }

  missingSetup(): Promise<string | undefined> {
    return missingSchema(this.db, this.schema);
  }

  async settingChecks(): Promise<StoreCheck[]> {
    return [await checkAutovacuum(this.db)];
  }

  async close(): Promise<void> {
    this.clock.stop();
    await this.signals.close();
    await this.db.destroy();
    // Kysely ends the pool only if it ever used it; direct pool queries (migrations, NOTIFY)
    // would otherwise keep the process alive until the idle timeout.
    if (!this.pool.ended) await this.pool.end();
  }
}
