/**
 * Signals between the processes of a PostgreSQL store (postgres.ts publish, subscribe): NOTIFY
 * out, a LISTEN connection in.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { LocalSignals, packMessages, TOPICS, type Topic } from './signals.ts';

/** NOTIFYs queued in one event-loop turn go out in one query (at most this many per query). */
const NOTIFY_BATCH = 100;
/** Bytes of one notification's payload: PostgreSQL refuses 8,000 or more. */
const NOTIFY_PAYLOAD_BYTES = 7_900;
/**
 * A NOTIFY statement's own transaction commits without waiting for its WAL flush. A NOTIFY takes
 * a transaction id, so its commit writes a commit record that `synchronous_commit` on would flush
 * to disk before the answer: a wait and a flush for a transaction that wrote no data. Notifications
 * never outlive a crash whatever the setting (listeners poll as well), and this changes only this
 * transaction (set_config's `is_local`): every state change still commits with its flush.
 */
const NOTIFY_COMMIT = `set_config('synchronous_commit', 'off', true)`;

/**
 * The LISTEN/NOTIFY channel of a topic. Channels belong to the database, not to a schema, so a
 * deployment in its own schema (BATON_PG_SCHEMA) gets its own channels: otherwise deployments
 * sharing a database would wake each other and see each other's execution ids on their event
 * streams. A long schema name is hashed (a channel name is an identifier: at most 63 bytes).
 */
export function channelName(schema: string | undefined, topic: Topic): string {
  if (!schema) return `baton_${topic}`;
  const tag = schema.length <= 40 ? schema : createHash('sha256').update(schema).digest('hex').slice(0, 16);
  return `baton_${tag}_${topic}`;
}

export class PostgresSignals {
  private readonly local = new LocalSignals();
  /** Messages not yet sent to other processes, per topic, in order. */
  private outbox = new Map<Topic, string[]>();
  private listener: pg.Client | undefined;
  private listening: Promise<void> | undefined;
  /** The LISTEN connection once it listens on every topic: this process's NOTIFYs go out on it. */
  private sender: pg.Client | undefined;
  /** The sender while a NOTIFY is out on it: the next one takes the pool rather than wait behind it. */
  private busy: pg.Client | undefined;
  private closed = false;

  constructor(
    private readonly pool: pg.Pool,
    private readonly client: { url: string; options: string; schema: string | undefined; Client: typeof pg.Client },
  ) {}

  private channel(topic: Topic): string {
    return channelName(this.client.schema, topic);
  }

  publish(topic: Topic, message: string): void {
    this.local.deliver(topic, message);
    // Out a turn after this process's own listeners acted on it: a claim it woke here goes to
    // PostgreSQL first, not behind the NOTIFY, which shortens a claim's wait.
    // Other processes hear it that one turn later.
    if (this.outbox.size === 0) setImmediate(() => setImmediate(() => void this.flush()));
    const list = this.outbox.get(topic);
    if (list) list.push(message);
    else this.outbox.set(topic, [message]);
  }

  subscribe(topic: Topic, fn: (message: string, local: boolean) => void): () => void {
    void this.startListening();
    return this.local.on(topic, fn);
  }

  private flush(): Promise<unknown> {
    const pending = this.outbox;
    this.outbox = new Map();
    // Each topic's messages of this turn packed into as few notifications as hold them.
    const batch: Array<[string, string]> = [];
    for (const [topic, messages] of pending)
      for (const payload of packMessages(messages, `${this.local.origin}|`, NOTIFY_PAYLOAD_BYTES))
        batch.push([this.channel(topic), payload]);
    const sent: Promise<unknown>[] = [];
    for (let i = 0; i < batch.length && !this.closed; i += NOTIFY_BATCH) {
      const part = batch.slice(i, i + NOTIFY_BATCH);
      const calls = part.map((_, j) => `pg_notify($${2 * j + 1}, $${2 * j + 2})`).join(', ');
      sent.push(this.notify({ name: `baton_notify_${part.length}`, text: `SELECT ${NOTIFY_COMMIT}, ${calls}`, values: part.flat() }));
    }
    return Promise.all(sent);
  }

  /**
   * One NOTIFY statement, on the LISTEN connection while it listens: PostgreSQL then hands this
   * process's own copy (dropped here by its origin) to the same backend and connection in the
   * same answer, so a NOTIFY wakes one backend and this process reads once. From a pool
   * connection it wakes that connection's backend, which signals the listening one, and this
   * process reads the answer and its copy apart. Where there is no such connection, while a
   * NOTIFY is still out on it (a slow or stalled connection never holds up the next one), or when
   * the send on it fails, the pool's.
   */
  private notify(query: { name: string; text: string; values: string[] }): Promise<unknown> {
    const viaPool = () => this.pool.query(query.text, query.values).catch(() => {});
    const sender = this.sender;
    if (!sender || this.busy === sender) return viaPool();
    this.busy = sender;
    return sender
      .query(query)
      .catch(viaPool)
      .finally(() => {
        if (this.busy === sender) this.busy = undefined;
      });
  }

  private startListening(): Promise<void> {
    if (this.listening || this.closed) return this.listening ?? Promise.resolve();
    const client = new this.client.Client({ connectionString: this.client.url, options: this.client.options } as pg.ClientConfig);
    this.listener = client;
    this.listening = (async () => {
      client.on('notification', (msg) => {
        const topic = TOPICS.find((t) => this.channel(t) === msg.channel);
        if (topic && msg.payload) this.local.deliverRemote(topic, msg.payload);
      });
      client.on('error', () => this.reconnect());
      client.on('end', () => this.reconnect());
      await client.connect();
      for (const t of TOPICS) await client.query(`LISTEN ${this.channel(t)}`);
      if (this.listener === client && !this.closed) this.sender = client;
    })().catch(() => this.reconnect());
    return this.listening;
  }

  private reconnect(): void {
    if (this.closed) return;
    this.listener?.removeAllListeners();
    this.listener?.end().catch(() => {});
    this.listener = undefined;
    this.sender = undefined;
    this.listening = undefined;
    // Waiters also poll, so a lost listener only costs latency until it is back.
    setTimeout(() => {
      // Cannot reject: a failed connect is caught inside and schedules the next reconnect.
      if (!this.closed && this.local.listenerCount() > 0) void this.startListening();
    }, 1000).unref();
  }

  /**
   * What this process announced last still reaches the others (the flush waits a turn), unless
   * PostgreSQL does not answer within a second: a shutdown never hangs on a notification.
   */
  async close(): Promise<void> {
    await Promise.race([this.flush(), new Promise((r) => setTimeout(r, 1_000).unref())]);
    this.closed = true;
    this.sender = undefined;
    this.local.clear();
    const listener = this.listener;
    if (listener) {
      listener.removeAllListeners();
      listener.on('error', () => {});
      await listener.end().catch(() => {});
    }
  }
}
