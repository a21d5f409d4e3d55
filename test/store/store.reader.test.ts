import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixtureJs } from '../../scripts/dist.ts';
import { spawnChild } from '../helpers/process.ts';
import type { Tx } from '../../src/store/adapter.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

/**
 * store.reader and store.snapshot: long reads that never hold the writer or (on SQLite) the
 * event loop. On SQLite they run on a read-only connection in a worker thread.
 */
describe(`store reader (${STORE_KIND})`, () => {
  let t: TestStore;
  beforeAll(async () => {
    t = await openTestStore();
    await t.store.db
      .insertInto('agents')
      .values({
        name: 'r',
        max_parallel: 1,
        max_backlog: 10,
        timeout_seconds: 60,
        lease_ttl_seconds: 30,
        max_redeliveries: 1,
        delivery: 'pull',
        push_url: null,
        push_secret: null,
        description: null,
        created_at: 1,
        updated_at: 1,
      })
      .execute();
  });
  afterAll(() => t.cleanup());

  const agentCount = async (h = t.store.reader) =>
    Number(
      (
        await h
          .selectFrom('agents')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    );

  it('sees what the writer committed', async () => {
    expect(await agentCount()).toBe(1);
    await t.store.transaction((tx) => tx.updateTable('agents').set({ max_parallel: 2 }).where('name', '=', 'r').execute());
    const row = await t.store.reader.selectFrom('agents').select('max_parallel').where('name', '=', 'r').executeTakeFirstOrThrow();
    expect(row.max_parallel).toBe(2);
  });

  it('keeps one consistent snapshot while the writer commits', async () => {
    const seen = await t.store.snapshot(async (tx) => {
      const before = await agentCount(tx);
      await t.store.transaction((w) =>
        w
          .insertInto('agents')
          .values({
            name: 'r2',
            max_parallel: 1,
            max_backlog: 10,
            timeout_seconds: 60,
            lease_ttl_seconds: 30,
            max_redeliveries: 1,
            delivery: 'pull',
            push_url: null,
            push_secret: null,
            description: null,
            created_at: 1,
            updated_at: 1,
          })
          .execute(),
      );
      const after = await agentCount(tx);
      return { before, after };
    });
    expect(seen.after).toBe(seen.before);
    expect(await agentCount()).toBe(seen.before + 1);
  });

  it('lets the writer and the event loop go on while a long read runs', async () => {
    // A read that takes a while on either store (a recursive count to a few million).
    const long = sql<{
      n: number;
    }>`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) SELECT count(*) AS n FROM c`;
    const order: string[] = [];
    const reading = long.execute(t.store.reader).then((r) => {
      order.push('long read');
      return Number(r.rows[0]!.n);
    });
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    await new Promise((r) => setTimeout(r, 5));
    await t.store.transaction((tx) => tx.updateTable('agents').set({ description: 'written meanwhile' }).where('name', '=', 'r').execute());
    order.push('write');
    const n = await reading;
    clearInterval(timer);
    expect(n).toBe(2_000_000);
    expect(order).toEqual(['write', 'long read']);
    expect(ticks).toBeGreaterThan(1);
  });

  it('keeps a process alive while a read is in flight, and lets it exit after', async () => {
    const child = spawnChild([fixtureJs('reader-only')], t.env);
    expect(await child.exited).toBe(0);
    expect(child.output()).toContain('read 1000000');
  });

  it('reports a failed statement and keeps serving', async () => {
    await expect(sql`SELECT * FROM no_such_table`.execute(t.store.reader)).rejects.toThrow(/no_such_table/);
    expect(await agentCount()).toBe(2);
  });

  it("runs a prune transaction's statements in order, one result each; one that fails fails the transaction", async () => {
    // On SQLite they go to the pruner's writer thread as one message; elsewhere one after another.
    const setDescription = (tx: Tx, from: string | null, to: string) =>
      tx
        .updateTable('agents')
        .set({ description: to })
        .where('name', '=', 'r')
        .where('description', from === null ? 'is' : '=', from)
        .compile();
    const description = async () =>
      (await t.store.db.selectFrom('agents').select('description').where('name', '=', 'r').executeTakeFirstOrThrow()).description;
    const before = await description();
    const out = await t.store.pruneTransaction(async (tx, _contended, inOrder) => {
      const results = await inOrder([
        setDescription(tx, before, 'a'),
        setDescription(tx, 'a', 'b'),
        tx.deleteFrom('agents').where('name', '=', 'none').compile(),
      ]);
      return results.map((r) => Number(r.numAffectedRows));
    });
    // Each ran after the one before it (the second matched only what the first wrote).
    expect(out).toEqual([1, 1, 0]);
    expect(await description()).toBe('b');
    const failed = t.store.pruneTransaction((tx, _contended, inOrder) =>
      inOrder([
        setDescription(tx, 'b', 'c'),
        // A NOT NULL column set to null.
        tx
          .updateTable('agents')
          .set({ max_parallel: null as never })
          .where('name', '=', 'r')
          .compile(),
        setDescription(tx, 'c', 'd'),
      ]),
    );
    await expect(failed).rejects.toThrow(/max_parallel|null/i);
    expect(await description()).toBe('b');
  });

  it('refuses writes on SQLite (read-only connection)', async () => {
    if (STORE_KIND !== 'sqlite') return; // PostgreSQL's reader is the pool; its read-only-ness is the snapshot's
    await expect(t.store.reader.deleteFrom('agents').execute()).rejects.toThrow(/readonly|read-only/i);
  });
});
