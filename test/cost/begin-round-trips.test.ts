/**
 * A PostgreSQL transaction's BEGIN rides with its first statement (PipelinedBeginDialect,
 * src/store/postgres-connection.ts): counted in round trips on the wire, through a TCP proxy that
 * sees every byte between the store and the server, so a Kysely or pg upgrade that puts BEGIN back
 * on a round trip of its own fails here even where the statement counts stay the same.
 */
import net from 'node:net';
import { CompiledQuery, Kysely, PostgresDialect, sql, type DatabaseConnection, type Driver } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { StoreAdapter, Tx } from '../../src/store/adapter.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { openPool, PipelinedBeginDialect } from '../../src/store/postgres-connection.ts';
import type { DB } from '../../src/store/schema.ts';
import { freePort } from '../helpers/process.ts';
import { openTestStore, PG_URL, STORE_KIND, type TestStore } from '../helpers/store.ts';

/**
 * A proxy counting round trips: a turn is the client speaking after the server answered (or
 * first). Whatever the client writes before any answer comes back, in one write or many, is one
 * turn; that is what a client waits for, whatever the driver's writes look like.
 */
interface TurnCounter {
  url: string;
  turns: number;
  close(): Promise<void>;
}

async function countingProxy(target: URL): Promise<TurnCounter> {
  const sockets = new Set<net.Socket>();
  const counter = { turns: 0 } as TurnCounter;
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    let answered = true;
    client.on('data', (chunk) => {
      if (answered) counter.turns++;
      answered = false;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      answered = true;
      client.write(chunk);
    });
    for (const sock of [client, upstream]) {
      sockets.add(sock);
      sock.on('close', () => sockets.delete(sock));
      sock.on('error', () => sock.destroy());
    }
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  const port = await freePort();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  const url = new URL(target.href);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  counter.url = url.href;
  counter.close = async () => {
    for (const sock of sockets) sock.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  };
  return counter;
}

const one = (db: Kysely<DB> | Tx, n: number) => sql<{ n: number }>`SELECT ${n}::int AS n`.execute(db);

describe.skipIf(STORE_KIND !== 'postgres')('round trips of a PostgreSQL transaction (PostgreSQL)', () => {
  let ts: TestStore;
  let proxy: TurnCounter;
  let store: StoreAdapter;

  beforeAll(async () => {
    ts = await openTestStore();
    proxy = await countingProxy(new URL(PG_URL));
    // One connection, and no clock or LISTEN connection (nothing here asks for them): every turn counted is the test's.
    store = openPostgres({ url: proxy.url, schema: ts.location.schema, poolMax: 1 });
    await one(store.db, 0); // the connection made (its start-up turns), outside any count
  });
  afterAll(async () => {
    await store?.close();
    await proxy?.close();
    await ts?.cleanup();
  });

  async function turnsOf(fn: () => Promise<unknown>): Promise<number> {
    await one(store.db, 0); // the pool's one connection is open and idle
    proxy.turns = 0;
    await fn();
    return proxy.turns;
  }

  it('a statement alone is one round trip (the probe counts what it should)', async () => {
    expect(await turnsOf(() => one(store.db, 1))).toBe(1);
  });

  it('a transaction of n statements, each awaited, is n + 1 round trips: BEGIN goes with the first, COMMIT alone', async () => {
    const statements = (n: number) => async (tx: Tx) => {
      for (let i = 0; i < n; i++) await one(tx, i);
    };
    expect(await turnsOf(() => store.transaction(statements(1)))).toBe(2);
    expect(await turnsOf(() => store.transaction(statements(3)))).toBe(4);
    // A snapshot's BEGIN names its isolation and access mode, and rides the same way.
    expect(await turnsOf(() => store.snapshot(statements(2)))).toBe(3);
  });

  it('a failed first statement fails the transaction, which is rolled back; the connection serves the next', async () => {
    await expect(store.transaction((tx) => sql`SELECT no_such_column FROM agents`.execute(tx))).rejects.toThrow(/no_such_column/);
    expect((await store.transaction((tx) => one(tx, 7))).rows).toEqual([{ n: 7 }]);
  });

  it("Kysely's own PostgreSQL dialect on the same wire pays BEGIN a round trip of its own (what the test would see if the pipelining stopped)", async () => {
    const pool = openPool({ url: proxy.url, options: `-c search_path=${ts.location.schema}`, poolMax: 1 });
    const plain = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
    try {
      await one(plain, 0);
      proxy.turns = 0;
      await plain.transaction().execute(async (tx) => {
        await one(tx, 1);
        await one(tx, 2);
      });
      expect(proxy.turns).toBe(4);
    } finally {
      await plain.destroy();
    }
  });
});

describe('PipelinedBeginDialect refuses to start where it could not pipeline', () => {
  // Pools that never connect: the checks run when the Kysely instance is made.
  const pool = (pipeline: boolean) => new pg.Pool({ pipeline, max: 1 } as pg.PoolConfig);
  const make = () => new Kysely<DB>({ dialect: new PipelinedBeginDialect({ pool: pool(true) }) });

  it('starts on the pool openPool makes', () => {
    expect(() => new Kysely<DB>({ dialect: new PipelinedBeginDialect({ pool: openPool({ url: PG_URL, options: '' }) }) })).not.toThrow();
  });

  it('a pool whose clients do not pipeline', () => {
    expect(() => new Kysely<DB>({ dialect: new PipelinedBeginDialect({ pool: pool(false) }) })).toThrow(/do not pipeline/);
  });

  it("a driver without beginTransaction, or whose BEGIN is not written at once through the connection's executeQuery", () => {
    const spy = vi.spyOn(PostgresDialect.prototype, 'createDriver');
    try {
      spy.mockReturnValueOnce({} as Driver);
      expect(make).toThrow(/no beginTransaction/);
      spy.mockReturnValueOnce({
        async beginTransaction(connection: DatabaseConnection) {
          await null; // a driver that waits for something before it writes BEGIN
          await connection.executeQuery(CompiledQuery.raw('begin'));
        },
      } as unknown as Driver);
      expect(make).toThrow(/did not write BEGIN/);
      spy.mockReturnValueOnce({
        async beginTransaction() {}, // a driver that begins some other way
      } as unknown as Driver);
      expect(make).toThrow(/did not write BEGIN/);
    } finally {
      spy.mockRestore();
    }
    expect(make).not.toThrow();
  });
});
