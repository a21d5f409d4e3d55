import { createHash } from 'node:crypto';
import pg from 'pg';
import { Kysely, PostgresDialect, sql, type SelectQueryBuilder } from 'kysely';
import { BULK_CHUNK, bulkColumns, inOrderOn, type LockMode, type StoreAdapter, type Tx } from './adapter.ts';
import { loadMigrations, MIGRATIONS_TABLE_SQL } from './migrations.ts';
import type { DB } from './schema.ts';
import { LocalSignals, packMessages, TOPICS, type Topic } from './signals.ts';

/**
 * The LISTEN/NOTIFY channel of a topic. Channels belong to the database, not to a schema, so a
 * deployment in its own schema (BATON_PG_SCHEMA) gets its own channels: otherwise deployments
 * sharing a database would wake each other and see each other's execution ids on their event
 * streams. A long schema name is hashed (a channel name is an identifier: at most 63 bytes).
 */

/**
 * JSON.stringify's replacer for JSON that PostgreSQL parses: a lone surrogate (no character; the
 * API refuses one in text, but a template may render one from a worker's JSON) becomes U+FFFD, as
 * the driver writes it in a plain parameter. JSON.stringify would write it as \ud800, which
 * PostgreSQL's JSON parser refuses, failing the whole statement.
 */
const LONE_SURROGATE_ESCAPE = /\\ud[89a-f]/i;
const wellFormed = (_key: string, v: unknown) => (typeof v === 'string' ? (v as string & { toWellFormed(): string }).toWellFormed() : v);

export function channelName(schema: string | undefined, topic: Topic): string {
  if (!schema) return `baton_${topic}`;
  const tag = schema.length <= 40 ? schema : createHash('sha256').update(schema).digest('hex').slice(0, 16);
  return `baton_${tag}_${topic}`;
}
/** NOTIFYs queued in one event-loop turn go out in one query (at most this many per query). */
const NOTIFY_BATCH = 100;
/** Bytes of one notification's payload: PostgreSQL refuses 8,000 or more. */
const NOTIFY_PAYLOAD_BYTES = 7_900;
/** Arbitrary constant key for the migration advisory lock ("baton" in ASCII). */
const MIGRATION_LOCK_KEY = 0x626174_6f6e;

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
async function retryConflicts<T>(attempt: () => Promise<T>): Promise<T> {
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

export interface PostgresOptions {
  url: string;
  /** Schema to use (created if missing). Tests give each file its own. Default: public. */
  schema?: string;
  /** Pool size per process. Default 10: enough for 50 claim loops, small enough for many processes. */
  poolMax?: number;
  /** Send repeated parameterised statements as named prepared statements (see nameStatements). Default true. */
  namedStatements?: boolean;
  /** Take the fast paths (the lone claim, submit and completion statements). Default true. */
  fastPaths?: boolean;
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

export function openPostgres(opts: PostgresOptions): StoreAdapter {
  const schema = opts.schema;
  if (schema && !/^[a-z_][a-z0-9_]*$/.test(schema)) throw new Error(`invalid schema name '${schema}'`);
  // JIT compilation off for Baton's sessions: its statements are short, and PostgreSQL's choice to
  // compile is made from cost estimates, which a table never analyzed (autovacuum off, or a table
  // grown since) inflates. Seen in a 200,000-task run: canary reads returning 150 rows, estimated
  // at ~40,000, compiled with inlining and optimization on every call, 170–450 ms each.
  const options = `-c jit=off${schema ? ` -c search_path=${schema}` : ''}`;
  const channel = (topic: Topic) => channelName(schema, topic);
  const pool = new pg.Pool({ connectionString: opts.url, max: opts.poolMax ?? 10, options, types } as pg.PoolConfig);
  // A client losing its connection (server restart) must not crash the process. The pool
  // listens on idle clients only; a checked-out client (inside a transaction, between
  // statements) would emit 'error' with no listener, which Node turns into an uncaught
  // exception. Its queries still fail, and the pool discards it on release.
  pool.on('error', () => {});
  pool.on('connect', (client) => {
    client.on('error', () => {});
    if (opts.namedStatements ?? true) nameStatements(client);
  });
  const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  const signals = new LocalSignals();
  /** Messages not yet sent to other processes, per topic, in order. */
  let outbox = new Map<Topic, string[]>();
  let listener: pg.Client | undefined;
  let listening: Promise<void> | undefined;
  let closed = false;
  let schemaReady: Promise<void> | undefined;

  function ensureSchema(): Promise<void> {
    if (!schema) return Promise.resolve();
    schemaReady ??= pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`).then(
      () => undefined,
      (err) => {
        // Two processes racing to create the schema: the loser sees a unique violation.
        if (err.code !== '23505' && err.code !== '42P06') throw err;
      },
    );
    return schemaReady;
  }

  function withRetry<T>(isolation: 'read committed' | 'repeatable read', readOnly: boolean, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return retryConflicts(() => {
      let builder = db.transaction().setIsolationLevel(isolation);
      if (readOnly) builder = builder.setAccessMode('read only');
      return builder.execute((trx) => fn(trx as unknown as Tx));
    });
  }

  function flush(): Promise<unknown> {
    const pending = outbox;
    outbox = new Map();
    // Each topic's messages of this turn packed into as few notifications as hold them.
    const batch: Array<[string, string]> = [];
    for (const [topic, messages] of pending)
      for (const payload of packMessages(messages, `${signals.origin}|`, NOTIFY_PAYLOAD_BYTES)) batch.push([channel(topic), payload]);
    const sent: Promise<unknown>[] = [];
    for (let i = 0; i < batch.length && !closed; i += NOTIFY_BATCH) {
      const part = batch.slice(i, i + NOTIFY_BATCH);
      const calls = part.map((_, j) => `pg_notify($${2 * j + 1}, $${2 * j + 2})`).join(', ');
      sent.push(pool.query(`SELECT ${calls}`, part.flat()).catch(() => {}));
    }
    return Promise.all(sent);
  }

  function startListening(): Promise<void> {
    if (listening || closed) return listening ?? Promise.resolve();
    const client = new pg.Client({ connectionString: opts.url, options } as pg.ClientConfig);
    listener = client;
    listening = (async () => {
      client.on('notification', (msg) => {
        const topic = TOPICS.find((t) => channel(t) === msg.channel);
        if (topic && msg.payload) signals.deliverRemote(topic, msg.payload);
      });
      client.on('error', () => reconnect());
      client.on('end', () => reconnect());
      await client.connect();
      for (const t of TOPICS) await client.query(`LISTEN ${channel(t)}`);
    })().catch(() => reconnect());
    return listening;
  }

  function reconnect() {
    if (closed) return;
    listener?.removeAllListeners();
    listener?.end().catch(() => {});
    listener = undefined;
    listening = undefined;
    // Waiters also poll, so a lost listener only costs latency until it is back.
    setTimeout(() => {
      // Cannot reject: a failed connect is caught inside and schedules the next reconnect.
      if (!closed && signals.listenerCount() > 0) void startListening();
    }, 1000).unref();
  }

  const adapter: StoreAdapter = {
    kind: 'postgres',
    loneStatements: opts.fastPaths !== false,
    lone: retryConflicts,
    db,
    transaction: (fn) => withRetry('read committed', false, fn),
    snapshot: (fn) => withRetry('repeatable read', true, fn),
    reader: db,
    pruneTransaction: (fn) =>
      withRetry('read committed', false, async (tx) => {
        await sql`SELECT set_config('baton.pruning', 'on', true)`.execute(tx);
        return fn(tx, () => false, inOrderOn(tx));
      }),
    // Autovacuum reclaims dead rows in place (docs/operations.md); nothing to hand back here.
    reclaimSpace: async () => 0,
    sweepCheckpoints: async () => undefined,
    checkpoint: async () => 0,
    lockRows<QB extends SelectQueryBuilder<any, any, any>>(qb: QB, mode: LockMode): QB {
      switch (mode) {
        case 'wait':
          return qb.forUpdate() as QB;
        case 'skip':
          return qb.forNoKeyUpdate().skipLocked() as QB;
        case 'admission':
          return qb.forNoKeyUpdate() as QB;
      }
    },
    async holdForNewWork(tx, names) {
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
    },
    async insertMany(tx, table, rows) {
      // One JSON value has no parameter limit: bigger chunks, fewer round trips.
      for (let i = 0; i < rows.length; i += 5 * BULK_CHUNK) {
        const chunk = rows.slice(i, i + 5 * BULK_CHUNK);
        const cols = sql.join(bulkColumns(chunk).map((c) => sql.ref(c)));
        // (The replacer only when the text shows a lone surrogate's escape: it costs a call per value.)
        const plain = JSON.stringify(chunk);
        const json = LONE_SURROGATE_ESCAPE.test(plain) ? JSON.stringify(chunk, wellFormed) : plain;
        await sql`INSERT INTO ${sql.table(table)} (${cols}) SELECT ${cols} FROM json_populate_recordset(NULL::${sql.table(table)}, ${json})`.execute(
          tx,
        );
      }
    },
    jsonElements: (json) => sql`json_array_elements(${json}::json)`,
    publish(topic, message) {
      signals.deliver(topic, message);
      // Out a turn after this process's own listeners acted on it: a claim it woke here goes to
      // PostgreSQL first, not behind the NOTIFY (W2 in-process p50 −0.4 ms; docs/benchmarks.md,
      // "Notifications packed"). Other processes hear it that one turn later.
      if (outbox.size === 0) setImmediate(() => setImmediate(() => void flush()));
      const list = outbox.get(topic);
      if (list) list.push(message);
      else outbox.set(topic, [message]);
    },
    subscribe(topic, fn) {
      void startListening();
      return signals.on(topic, fn);
    },
    async migrate() {
      await ensureSchema();
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        // Every process that starts at once queues here; the first applies, the rest find nothing to do.
        await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY]);
        await client.query(MIGRATIONS_TABLE_SQL);
        const done = new Set((await client.query('SELECT version FROM baton_migrations')).rows.map((r) => Number(r.version)));
        const applied: number[] = [];
        for (const m of loadMigrations('postgres')) {
          if (done.has(m.version)) continue;
          await client.query(m.sql);
          await client.query('INSERT INTO baton_migrations (version, name, applied_at) VALUES ($1, $2, $3)', [
            m.version,
            m.name,
            Date.now(),
          ]);
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
    },
    async migrationStatus() {
      // Read-only: with a schema that does not exist yet, to_regclass finds nothing.
      const known = loadMigrations('postgres').map((m) => m.version);
      const exists = await pool.query("SELECT to_regclass('baton_migrations') AS t");
      const applied = exists.rows[0].t
        ? (await pool.query('SELECT version FROM baton_migrations ORDER BY version')).rows.map((r) => Number(r.version))
        : [];
      return { applied, known };
    },
    async close() {
      // What this process announced last still reaches the others (the flush waits a turn), unless
      // PostgreSQL does not answer within a second: a shutdown never hangs on a notification.
      await Promise.race([flush(), new Promise((r) => setTimeout(r, 1_000).unref())]);
      closed = true;
      signals.clear();
      if (listener) {
        listener.removeAllListeners();
        listener.on('error', () => {});
        await listener.end().catch(() => {});
      }
      await db.destroy();
      // Kysely ends the pool only if it ever used it; direct pool queries (migrations, NOTIFY)
      // would otherwise keep the process alive until the idle timeout.
      if (!pool.ended) await pool.end();
    },
  };
  return adapter;
}
