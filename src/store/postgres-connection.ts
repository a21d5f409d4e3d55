/**
 * The connections of a PostgreSQL store (postgres.ts): the pool's settings, statements named
 * per connection, and the retry of work PostgreSQL ended on a conflict.
 */
import { PostgresDialect, type DatabaseConnection, type Driver, type TransactionSettings } from 'kysely';
import pg from 'pg';
import { parseHosts, PrimaryResolver, primaryClientClass } from './postgres-hosts.ts';

/**
 * SQLSTATEs after which a whole transaction is retried, with jittered backoff. Anything else
 * is a real error and surfaces. 40001 serialization_failure, 40P01 deadlock_detected,
 * 55P03 lock_not_available.
 */
export const RETRYABLE_SQLSTATES: ReadonlySet<string> = new Set(['40001', '40P01', '55P03']);
const MAX_TX_ATTEMPTS = 5;

/**
 * Run `attempt` (a transaction, or one statement outside any) again after a retryable SQLSTATE:
 * PostgreSQL undid all of its writes. Up to MAX_TX_ATTEMPTS, with jittered backoff.
 */
export async function retryConflicts<T>(attempt: () => Promise<T>): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (err: any) {
      if (!RETRYABLE_SQLSTATES.has(err?.code) || n >= MAX_TX_ATTEMPTS) throw err;
      const backoff = Math.min(200, 5 * 2 ** n);
      await new Promise((r) => setTimeout(r, backoff / 2 + Math.random() * backoff));
    }
  }
}

/** Longest statement text worth preparing by name; longer ones (bulk inserts) are rarely repeated. */
const MAX_NAMED_TEXT = 8_192;
/** Distinct statements one connection prepares by name; past this, new texts go unnamed. */
const MAX_NAMED_PER_CONNECTION = 500;

/**
 * Send each parameterised statement text as a named prepared statement on this connection: the
 * first use parses it under a name (b0, b1, …) and every later use binds and executes it without
 * PostgreSQL parsing and analysing the text again. Kysely sends (text, values); the text is the
 * key. Texts vary only with the number of items in IN lists and bulk rows, so a connection meets
 * a bounded set; past MAX_NAMED_PER_CONNECTION it stops naming new ones. A reconnect starts a new
 * map (prepared statements live with their connection).
 */
function nameStatements(client: pg.PoolClient): void {
  const names = new Map<string, string>();
  // The class's query, looked up at each call (not bound once), so whatever wraps it later still sees every statement.
  const proto = Object.getPrototypeOf(client) as { query: (...args: unknown[]) => unknown };
  const query = (...args: unknown[]) => proto.query.apply(client, args);
  (client as { query: unknown }).query = (config: unknown, values?: unknown, callback?: unknown) => {
    if (typeof config === 'string' && Array.isArray(values) && values.length > 0 && config.length <= MAX_NAMED_TEXT) {
      let name = names.get(config);
      if (name === undefined && names.size < MAX_NAMED_PER_CONNECTION) {
        name = `b${names.size}`;
        names.set(config, name);
      }
      if (name !== undefined) return query({ name, text: config, values }, callback);
    }
    return query(config, values, callback);
  };
}

// BIGINT (int8) columns hold epoch milliseconds and counts: far below 2^53, so plain numbers.
const types = {
  getTypeParser(oid: number, format?: any) {
    if (oid === 20) return (v: string) => Number(v);
    return pg.types.getTypeParser(oid, format);
  },
};

/**
 * The session options of every connection. JIT compilation off for Baton's sessions: its
 * statements are short, and PostgreSQL's choice to compile is made from cost estimates, which a
 * table never analyzed (autovacuum off, or a table grown since) inflates: small canary reads, estimated
 * at hundreds of times their rows, were compiled with inlining and optimization on every call,
 * each costing far more than the read.
 */
export function sessionOptions(schema: string | undefined): string {
  return `-c jit=off${schema ? ` -c search_path=${schema}` : ''}`;
}

/**
 * The client class of every connection (pool and LISTEN) to `url`: with several hosts (or
 * target_session_attrs=read-write), one that finds the host taking writes (postgres-hosts.ts).
 */
export function clientFor(url: string, options: string): { url: string; Client: typeof pg.Client } {
  const list = parseHosts(url);
  if (!list.readWrite) return { url, Client: pg.Client };
  const resolver = new PrimaryResolver(list, { connectionString: list.url, options } as pg.ClientConfig);
  return { url: list.url, Client: primaryClientClass(resolver) };
}

export function openPool(o: {
  url: string;
  options: string;
  poolMax?: number;
  namedStatements?: boolean;
  Client?: typeof pg.Client;
}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: o.url,
    max: o.poolMax ?? 10,
    options: o.options,
    // Each query written at once, answered in order (PipelinedBegin): the store's code awaits each
    // statement before the next, so only a BEGIN is ever written ahead of another.
    pipeline: true,
    types,
    ...(o.Client ? { Client: o.Client } : {}),
  } as pg.PoolConfig);
  // A client losing its connection (server restart) must not crash the process. The pool
  // listens on idle clients only; a checked-out client (inside a transaction, between
  // statements) would emit 'error' with no listener, which Node turns into an uncaught
  // exception. Its queries still fail, and the pool discards it on release.
  pool.on('error', () => {});
  pool.on('connect', (client) => {
    client.on('error', () => {});
    if (o.namedStatements ?? true) nameStatements(client);
  });
  return pool;
}

/**
 * PostgreSQL's dialect with a transaction's BEGIN written with its first statement instead of a
 * round trip before it: the pool's clients pipeline (openPool), and the driver does not wait for
 * BEGIN's answer before the first statement is written. That statement's answer waits for
 * BEGIN's and fails with BEGIN's error, so the transaction fails (and is rolled back) whenever
 * BEGIN did. BEGIN fails only with its connection, which fails the statement written after it.
 *
 * It relies on what Kysely's driver and pg do today, and checks each when the Kysely instance is
 * made, so an upgrade that changes them stops the process at start instead of quietly costing a
 * round trip a transaction (test/cost/begin-round-trips.test.ts counts them on the wire).
 */
export class PipelinedBeginDialect extends PostgresDialect {
  readonly #pool: pg.Pool;

  constructor(config: { pool: pg.Pool }) {
    super(config);
    this.#pool = config.pool;
  }

  override createDriver(): Driver {
    assertPipelines(this.#pool);
    const driver = super.createDriver();
    if (typeof driver.beginTransaction !== 'function') {
      throw new Error(
        "PipelinedBeginDialect: Kysely's PostgreSQL driver has no beginTransaction to write BEGIN ahead of the first statement",
      );
    }
    const begin = driver.beginTransaction.bind(driver);
    assertBeginWrittenAtOnce(begin);
    driver.beginTransaction = async (connection: DatabaseConnection, settings: TransactionSettings) => {
      const own = connection as { executeQuery: DatabaseConnection['executeQuery'] };
      const execute = own.executeQuery;
      if (typeof execute !== 'function') throw new Error('PipelinedBeginDialect: a connection without executeQuery');
      const begun = begin(connection, settings);
      begun.catch(() => {});
      own.executeQuery = async (query) => {
        // The first statement only: the next ones are the connection's own method again.
        own.executeQuery = execute;
        const answer = execute.call(connection, query);
        try {
          await begun;
        } catch (err) {
          await answer.catch(() => {});
          throw err;
        }
        return answer as never;
      };
    };
    return driver;
  }
}

/** The pool's clients write each query at once (pg ≥ 8.23 with `pipeline: true`), or BEGIN would still wait for its answer. */
function assertPipelines(pool: pg.Pool): void {
  const { options, Client } = pool as unknown as { options?: pg.PoolConfig & { pipeline?: boolean }; Client?: typeof pg.Client };
  const clientPipelines = (new (Client ?? pg.Client)({ pipeline: true } as pg.ClientConfig) as { pipeline?: unknown }).pipeline === true;
  if (options?.pipeline !== true || !clientPipelines) {
    throw new Error(
      "PipelinedBeginDialect: the pool's clients do not pipeline (pg ≥ 8.23 with pipeline: true), so BEGIN would cost a round trip of its own",
    );
  }
}

/**
 * The driver's beginTransaction writes BEGIN through the connection's executeQuery before it
 * first waits: the wrapper hands the first statement to that same connection right after. Tried
 * on a stand-in connection, which answers at once and sends nothing.
 */
function assertBeginWrittenAtOnce(begin: Driver['beginTransaction']): void {
  let written: string | undefined;
  const probe = {
    executeQuery: async (query: { sql: string }) => {
      written ??= query.sql;
      return { rows: [] };
    },
  } as unknown as DatabaseConnection;
  begin(probe, {}).catch(() => {});
  if (!/^(begin|start transaction)\b/i.test(written ?? '')) {
    throw new Error(
      `PipelinedBeginDialect: Kysely's beginTransaction did not write BEGIN through the connection's executeQuery at once (it wrote ${JSON.stringify(written)}), so the first statement could not ride with it`,
    );
  }
}
