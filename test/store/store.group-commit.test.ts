import { closeSync, mkdtempSync, openSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import type { StoreAdapter, Tx } from '../../src/store/adapter.ts';
import type { GroupLimits } from '../../src/store/sqlite-group-commit.ts';
import { commitStats, openSqlite } from '../../src/store/sqlite.ts';
import { manualClock } from '../helpers/clock.ts';
import { STORE_KIND } from '../helpers/store.ts';

/**
 * Group commit (src/store/sqlite-group-commit.ts): write transactions that arrive in one
 * event-loop turn share one COMMIT, each in its own savepoint. Only a store with a single
 * writer connection groups; PostgreSQL commits each transaction on its own pooled connection.
 */
const describeGroupCommit = STORE_KIND === 'sqlite' ? describe : describe.skip;

interface GroupStore {
  store: StoreAdapter;
  file: string;
  cleanup(): Promise<void>;
}

/** A migrated SQLite store of its own: these tests choose the group bounds. */
async function openGroupStore(groupLimits: Partial<GroupLimits>): Promise<GroupStore> {
  const dir = mkdtempSync(join(tmpdir(), 'baton-gc-'));
  const file = join(dir, 'baton.sqlite');
  // No checkpoint may reset the WAL while walCommits counts its frames: none in the background,
  // none automatic.
  const store = openSqlite(file, { groupLimits, checkpointEveryMs: 0 });
  await store.migrate();
  await sql`PRAGMA wal_autocheckpoint = 0`.execute(store.db);
  return {
    store,
    file,
    async cleanup() {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const stats = (t: GroupStore) => commitStats(t.store)!;

/**
 * Commit frames in the WAL file, counted from the file itself: an independent check of the
 * adapter's own counter. A WAL frame header's second word is non-zero only on the last frame
 * of a commit; frames whose salts differ from the header's are left over from before a reset.
 */
function walCommits(file: string): number {
  const fd = openSync(`${file}-wal`, 'r');
  try {
    const head = Buffer.alloc(32);
    if (readSync(fd, head, 0, 32, 0) < 32) return 0;
    const pageSize = head.readUInt32BE(8);
    const salt = head.subarray(16, 24);
    const frame = Buffer.alloc(24);
    let commits = 0;
    for (let at = 32; readSync(fd, frame, 0, 24, at) === 24; at += 24 + pageSize) {
      if (!frame.subarray(8, 16).equals(salt)) break;
      if (frame.readUInt32BE(4) !== 0) commits++;
    }
    return commits;
  } finally {
    closeSync(fd);
  }
}

const agentValues = (name: string) => ({
  name,
  max_parallel: 1,
  max_backlog: 1000,
  timeout_seconds: 60,
  lease_ttl_seconds: 30,
  max_redeliveries: 1,
  delivery: 'pull' as const,
  push_url: null,
  push_secret: null,
  description: null,
  created_at: 1,
  updated_at: 1,
});
const insertAgent = (tx: Tx, name: string) => tx.insertInto('agents').values(agentValues(name)).execute();

describeGroupCommit('group commit (sqlite)', () => {
  let t: GroupStore;
  let engine: Engine;
  let file: string;
  /** A second connection: it sees only what was committed, and reads synchronously. */
  let peek: Database.Database;
  const visible = (id: string) => peek.prepare('SELECT status FROM executions WHERE id = ?').get(id) !== undefined;
  const agentExists = (name: string) => peek.prepare('SELECT 1 FROM agents WHERE name = ?').get(name) !== undefined;

  beforeAll(async () => {
    // Groups split only by count here: on a loaded machine a burst can pass the 10 ms work bound
    // and split in two, which the last tests check on a store with the default bound.
    t = await openGroupStore({ maxWorkMs: 60_000 });
    file = t.file;
    peek = new Database(file, { readonly: true });
    engine = new Engine({ store: t.store, clock: manualClock(), nodeId: 'gc', cancelGraceMs: 30_000, backlogExpiryMs: 86_400_000 });
    await engine.agents.create({ name: 'burst', max_parallel: 3, max_backlog: 10_000 }, 'test');
  });
  afterAll(async () => {
    peek.close();
    engine.close();
    await t.cleanup();
  });

  it('runs concurrent submits in one turn as one commit, each with its own answer', async () => {
    const before = { ...stats(t) };
    const wal = walCommits(file);
    const messages = Array.from({ length: 20 }, (_, i) => `task ${i}`);
    const rows = await Promise.all(messages.map((message) => engine.submit('burst', { message }, 'test')));
    expect(rows.map((r) => r.message)).toEqual(messages);
    expect(new Set(rows.map((r) => r.id)).size).toBe(20);
    expect(rows.every((r) => r.status === 'queued' && visible(r.id))).toBe(true);
    expect(stats(t).transactions - before.transactions).toBe(20);
    expect(stats(t).commits - before.commits).toBe(1);
    expect(walCommits(file) - wal).toBe(1);
  });

  it('rolls back only the caller that threw; the others commit and get their answers', async () => {
    const before = { ...stats(t) };
    const own = new Error('caller b gave up');
    const results = await Promise.allSettled([
      t.store.transaction(async (tx) => {
        await insertAgent(tx, 'gc-a');
        return 'a';
      }),
      t.store.transaction(async (tx) => {
        await insertAgent(tx, 'gc-b');
        throw own;
      }),
      // A statement the database refuses (a duplicate key) after a write of its own.
      t.store.transaction(async (tx) => {
        await insertAgent(tx, 'gc-c-first');
        await insertAgent(tx, 'gc-a');
        return 'c';
      }),
      // A trigger's RAISE(ABORT): audit_log is append-only.
      t.store.transaction(async (tx) => {
        await insertAgent(tx, 'gc-d-first');
        await tx.deleteFrom('audit_log').execute();
        return 'd';
      }),
      t.store.transaction(async (tx) => {
        await insertAgent(tx, 'gc-e');
        return 'e';
      }),
    ]);
    expect(results[0]).toEqual({ status: 'fulfilled', value: 'a' });
    expect(results[1]).toEqual({ status: 'rejected', reason: own });
    expect(results[2]).toMatchObject({ status: 'rejected', reason: { code: 'SQLITE_CONSTRAINT_PRIMARYKEY' } });
    expect(results[3]).toMatchObject({ status: 'rejected', reason: { message: expect.stringContaining('append-only') } });
    expect(results[4]).toEqual({ status: 'fulfilled', value: 'e' });
    expect(['gc-a', 'gc-b', 'gc-c-first', 'gc-d-first', 'gc-e'].map(agentExists)).toEqual([true, false, false, false, true]);
    expect(stats(t).commits - before.commits).toBe(1);
  });

  it('fails every caller in the group when the COMMIT itself fails', async () => {
    const before = { ...stats(t) };
    const results = await Promise.allSettled([
      t.store.transaction((tx) => insertAgent(tx, 'gc-commit-a')),
      // A deferred foreign key is checked at COMMIT: this member's savepoint releases fine,
      // and the shared COMMIT refuses the whole group.
      t.store.transaction(async (tx) => {
        await sql`PRAGMA defer_foreign_keys = ON`.execute(tx);
        await tx
          .insertInto('execution_events')
          .values({ execution_id: 'ex_missing', agent: 'burst', to_status: 'queued', at: 1, actor: 'test', attempt: 0 })
          .execute();
      }),
      t.store.transaction((tx) => insertAgent(tx, 'gc-commit-c')),
    ]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected']);
    for (const r of results) expect((r as PromiseRejectedResult).reason).toMatchObject({ code: 'SQLITE_CONSTRAINT_FOREIGNKEY' });
    expect(agentExists('gc-commit-a') || agentExists('gc-commit-c')).toBe(false);
    expect(stats(t).commits).toBe(before.commits);
    // The connection is usable afterwards: no transaction was left open.
    await t.store.transaction((tx) => insertAgent(tx, 'gc-after'));
    expect(agentExists('gc-after')).toBe(true);
  });

  it('settles callers and fires their signals only after the shared commit', async () => {
    const early: string[] = [];
    const signalled: string[] = [];
    const off = t.store.subscribe('execution', (message) => {
      const ids = message.split('\t')[1]!.split(',');
      for (const id of ids) {
        signalled.push(id);
        if (!visible(id)) early.push(`signal ${id}`);
      }
    });
    try {
      const rows = await Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          engine.submit('burst', { message: `signal ${i}` }, 'test').then((row) => {
            if (!visible(row.id)) early.push(`answer ${row.id}`);
            return row;
          }),
        ),
      );
      await new Promise((r) => setImmediate(r));
      expect(early).toEqual([]);
      expect(signalled).toEqual(expect.arrayContaining(rows.map((r) => r.id)));
    } finally {
      off();
    }
  });

  it("admits a task to the claim parked on its agent in the submit's own commit, and answers both after it", async () => {
    await engine.agents.create({ name: 'handoff', max_parallel: 1, max_backlog: 100 }, 'test');
    const early: string[] = [];
    const claim = engine.claim('handoff', { owner: 'w', max: 1, waitMs: 10_000 }).then((rows) => {
      for (const r of rows) if (!visible(r.id)) early.push(`claim ${r.id}`);
      return rows;
    });
    // The claim looks, finds nothing and parks.
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    const before = { ...stats(t) };
    const wal = walCommits(file);
    const submitted = await engine.submit('handoff', { message: 'at once' }, 'test');
    if (!visible(submitted.id)) early.push(`submit ${submitted.id}`);
    const claimed = await claim;
    expect(claimed.map((r) => [r.id, r.status])).toEqual([[submitted.id, 'running']]);
    expect(early).toEqual([]);
    // One BEGIN … COMMIT for the submit and the admission it woke.
    expect(stats(t).transactions - before.transactions).toBe(2);
    expect(stats(t).commits - before.commits).toBe(1);
    expect(walCommits(file) - wal).toBe(1);
  });

  it('rolls back a transaction that joined a commit alone, and never calls back for a caller that failed', async () => {
    const before = { ...stats(t) };
    const own = new Error('the joiner gave up');
    let joined: Promise<unknown> | undefined;
    let calledBack = false;
    const results = await Promise.allSettled([
      t.store.transaction(async (tx) => {
        await insertAgent(tx, 'gc-join-a');
        t.store.shareCommit!(tx, () => {
          joined = t.store.transaction(async (tx2) => {
            await insertAgent(tx2, 'gc-join-b');
            throw own;
          });
        });
      }),
      t.store.transaction(async (tx) => {
        await insertAgent(tx, 'gc-join-c');
        t.store.shareCommit!(tx, () => (calledBack = true));
        throw new Error('c gave up');
      }),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected']);
    await expect(joined).rejects.toBe(own);
    expect(calledBack).toBe(false);
    expect(['gc-join-a', 'gc-join-b', 'gc-join-c'].map(agentExists)).toEqual([true, false, false]);
    expect(stats(t).commits - before.commits).toBe(1);
  });

  it('never lets another caller run statements while one awaits outside the database', async () => {
    const log: string[] = [];
    const slow = t.store.transaction(async (tx) => {
      log.push('slow:start');
      await insertAgent(tx, 'gc-slow');
      await new Promise((r) => setTimeout(r, 30)); // it should not, but it may
      log.push('slow:end');
    });
    // Queued while the slow one waits on its timer.
    await new Promise((r) => setTimeout(r, 5));
    const quick = Array.from({ length: 5 }, (_, i) =>
      t.store.transaction(async (tx) => {
        log.push(`quick${i}:start`);
        await insertAgent(tx, `gc-quick-${i}`);
        log.push(`quick${i}:end`);
      }),
    );
    await Promise.all([slow, ...quick]);
    expect(log.slice(0, 2)).toEqual(['slow:start', 'slow:end']);
    for (let i = 0; i < 5; i++) expect(log.indexOf(`quick${i}:end`)).toBe(log.indexOf(`quick${i}:start`) + 1);
  });

  it('bounds a group to 256 transactions', async () => {
    const before = { ...stats(t) };
    const groupOf: number[] = [];
    await Promise.all(
      Array.from({ length: 600 }, (_, i) =>
        t.store.transaction(async (tx) => {
          groupOf.push(stats(t).groups);
          await insertAgent(tx, `gc-many-${i}`);
        }),
      ),
    );
    expect([...countBy(groupOf).values()]).toEqual([256, 256, 88]);
    expect(stats(t).commits - before.commits).toBe(3);
  });

  it('bounds a group to ~10 ms of work, so it never holds the event loop long', async () => {
    const t = await openGroupStore({ maxWorkMs: 10 });
    onTestFinished(() => t.cleanup());
    const groupOf: number[] = [];
    await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        t.store.transaction(async (tx) => {
          groupOf.push(stats(t).groups);
          await insertAgent(tx, `gc-busy-${i}`);
          const until = performance.now() + 3;
          while (performance.now() < until); // 3 ms of synchronous work per transaction
        }),
      ),
    );
    // A member joins only while the group has worked < 10 ms: at 3 ms each, 4 at most.
    const sizes = [...countBy(groupOf).values()];
    expect(Math.max(...sizes)).toBeLessThanOrEqual(4);
    expect(sizes.length).toBeGreaterThanOrEqual(3);
  });

  it('keeps the prune transaction out of every group', async () => {
    const seen: number[] = [];
    const pruning = (tx: Tx) =>
      tx
        .selectFrom('retention_state')
        .select('pruning')
        .where('id', '=', 'retention')
        .executeTakeFirstOrThrow()
        .then((r) => Number(r.pruning));
    const writers = Array.from({ length: 10 }, (_, i) =>
      t.store.transaction(async (tx) => {
        seen.push(await pruning(tx));
        await insertAgent(tx, `gc-prune-${i}`);
      }),
    );
    const pruned = t.store.pruneTransaction(pruning);
    const more = Array.from({ length: 10 }, () => t.store.transaction(async (tx) => void seen.push(await pruning(tx))));
    expect(await pruned).toBe(1);
    await Promise.all([...writers, ...more]);
    expect(seen).toEqual(Array(20).fill(0));
  });
});

function countBy(values: number[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const v of values) m.set(v, (m.get(v) ?? 0) + 1);
  return m;
}
