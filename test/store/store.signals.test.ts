/**
 * Signals between processes on PostgreSQL (LISTEN/NOTIFY): a deployment in its own schema hears
 * its own processes and never another deployment's in the same database. (SQLite's signals stay
 * in the process; the engine tests cover them.)
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { channelName, openPostgres } from '../../src/store/postgres.ts';
import { packMessages } from '../../src/store/signals.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { describeMultiProcess, openTestStore, PG_URL, untilHearing, type TestStore } from '../helpers/store.ts';

describeMultiProcess('signals on PostgreSQL', () => {
  let mine: TestStore;
  let other: TestStore;
  let twin: StoreAdapter;

  beforeAll(async () => {
    mine = await openTestStore();
    other = await openTestStore();
    // A second process of `mine`'s deployment: same database, same schema, its own connections.
    twin = openPostgres({ url: PG_URL, schema: mine.location.schema, poolMax: 1 });
  });
  afterAll(async () => {
    await twin?.close();
    await mine?.cleanup();
    await other?.cleanup();
  });

  it("hears its own deployment's processes, never another schema's", async () => {
    const heard: string[] = [];
    const off = mine.store.subscribe('agent', (message) => void heard.push(message));
    // LISTEN is issued when the first listener subscribes: wait until it hears its twin.
    await untilHearing(mine.store, twin);
    other.store.publish('agent', 'from-another-deployment');
    twin.publish('agent', 'from-my-twin');
    await expect.poll(() => heard, { timeout: 10_000 }).toContain('from-my-twin');
    await new Promise((r) => setTimeout(r, 300)); // whatever else was coming has come
    expect(heard).not.toContain('from-another-deployment');
    off();
  });

  it('hears every message of a busy turn, in order, packed into few notifications', async () => {
    const heard: string[] = [];
    const off = mine.store.subscribe('execution', (message) => void heard.push(message));
    await untilHearing(mine.store, twin);
    // ~60 bytes each: 1,000 of them need about eight notifications of 7,900 bytes.
    const sent = Array.from({ length: 1000 }, (_, i) => `agent-${i % 7}\t${String(i).padStart(26, '0')}\tqueued`);
    for (const m of sent) twin.publish('execution', m);
    await expect.poll(() => heard.length, { timeout: 10_000 }).toBe(sent.length);
    expect(heard).toEqual(sent);
    off();
  });

  it('sends what a process announced last before it closes', async () => {
    const heard: string[] = [];
    const off = mine.store.subscribe('agent', (message) => void heard.push(message));
    const leaving = openPostgres({ url: PG_URL, schema: mine.location.schema, poolMax: 1 });
    await untilHearing(mine.store, leaving);
    leaving.publish('agent', 'last-words');
    await leaving.close();
    await expect.poll(() => heard, { timeout: 10_000 }).toContain('last-words');
    off();
  });

  it('sends what a listening process announces on its LISTEN connection, not through its pool', async () => {
    const heard: string[] = [];
    const off = mine.store.subscribe('agent', (message) => void heard.push(message));
    const sender = openPostgres({ url: PG_URL, schema: mine.location.schema, poolMax: 1 });
    const offSender = sender.subscribe('agent', () => {});
    try {
      await untilHearing(mine.store, sender);
      await untilHearing(sender, mine.store); // its LISTEN connection is up
      // Every NOTIFY the pool is asked to send, counted (a spy on the real pool: it still sends).
      const pool = (sender as unknown as { pool: { query: (...args: unknown[]) => Promise<unknown> } }).pool;
      const query = pool.query.bind(pool);
      let viaPool = 0;
      pool.query = (...args: unknown[]) => {
        if (String(args[0]).includes('pg_notify')) viaPool++;
        return query(...args);
      };
      // Its LISTEN statements finish just after the one that hears: the first sends may still take the pool.
      await expect
        .poll(
          async () => {
            const before = viaPool;
            const message = `on-its-listener-${heard.length}`;
            sender.publish('agent', message);
            await expect.poll(() => heard, { timeout: 10_000 }).toContain(message);
            return viaPool - before;
          },
          { timeout: 10_000 },
        )
        .toBe(0);
    } finally {
      offSender();
      off();
      await sender.close();
    }
  });

  it("commits a NOTIFY's own transaction without its flush, and leaves the connection's setting as it was", async () => {
    const heard: string[] = [];
    const off = mine.store.subscribe('agent', (message) => void heard.push(message));
    // No listener of its own: its NOTIFYs take its pool's one connection.
    const sender = openPostgres({ url: PG_URL, schema: mine.location.schema, poolMax: 1 });
    const pool = (sender as unknown as { pool: { query: (...args: unknown[]) => Promise<unknown> } }).pool;
    const query = pool.query.bind(pool);
    const texts: string[] = [];
    pool.query = (...args: unknown[]) => {
      texts.push(String(args[0]));
      return query(...args);
    };
    try {
      await untilHearing(mine.store, sender);
      sender.publish('agent', 'not-flushed');
      await expect.poll(() => heard, { timeout: 10_000 }).toContain('not-flushed');
      const notify = texts.filter((t) => t.includes('pg_notify'));
      expect(notify.length).toBeGreaterThan(0);
      for (const t of notify) expect(t).toMatch(/^SELECT set_config\('synchronous_commit', 'off', true\), pg_notify/);
      // The same connection's next transactions (state changes) still wait for their flush.
      const { rows } = await sql<{ synchronous_commit: string }>`SHOW synchronous_commit`.execute(sender.db);
      expect(rows[0]!.synchronous_commit).toBe('on');
    } finally {
      off();
      await sender.close();
    }
  });

  it('names channels per schema, within PostgreSQL’s 63-byte identifiers', () => {
    expect(channelName(undefined, 'execution')).toBe('baton_execution');
    expect(channelName('tenant_a', 'execution')).toBe('baton_tenant_a_execution');
    const long = channelName('s'.repeat(63), 'execution');
    expect(Buffer.byteLength(long)).toBeLessThanOrEqual(63);
    expect(long).not.toBe(channelName('s'.repeat(62) + 't', 'execution'));
  });
});

describe('packMessages', () => {
  it('keeps order, fills each payload up to the bound, and sends a message too long for one alone', () => {
    const messages = ['a'.repeat(40), 'b'.repeat(40), 'c'.repeat(40), 'd'.repeat(200), 'e'];
    const payloads = packMessages(messages, 'o|', 100);
    expect(payloads).toEqual([`o|${'a'.repeat(40)}\n${'b'.repeat(40)}`, `o|${'c'.repeat(40)}`, `o|${'d'.repeat(200)}`, 'o|e']);
    for (const p of payloads.filter((p) => !p.includes('d'))) expect(Buffer.byteLength(p)).toBeLessThanOrEqual(100);
    // What a listener gets back: every message, in order.
    expect(payloads.flatMap((p) => p.slice(2).split('\n'))).toEqual(messages);
  });

  it('counts bytes, not characters', () => {
    const payloads = packMessages(['é'.repeat(30), 'é'.repeat(30)], 'o|', 100);
    expect(payloads).toHaveLength(2); // 60 bytes each
    expect(packMessages([], 'o|', 100)).toEqual([]);
  });
});
