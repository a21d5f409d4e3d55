/**
 * WAL checkpoints off the event loop (SQLite): the writer connection's automatic checkpoint is a
 * far backstop, and the worker thread checkpoints what was committed, every
 * BACKGROUND_CHECKPOINT_MS, and lets the WAL start over past WAL_RESTART_FRAMES. PostgreSQL has its
 * own checkpointer: nothing of this exists there.
 */
import { closeSync, mkdtempSync, openSync, readSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { checkpointStats, openSqlite, WRITER_AUTOCHECKPOINT_PAGES } from '../../src/store/sqlite.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock: manualClock(), nodeId: 'checkpoints' });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

/** How many times the WAL started over: SQLite's checkpoint sequence number, in its header (big-endian, at byte 12). */
function walRestarts(wal: string): number {
  const fd = openSync(wal, 'r');
  try {
    const header = Buffer.alloc(16);
    return readSync(fd, header, 0, 16, 0) < 16 ? 0 : header.readUInt32BE(12);
  } finally {
    closeSync(fd);
  }
}

async function until(what: string, ok: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe(`WAL checkpoints (${STORE_KIND})`, () => {
  it.runIf(STORE_KIND === 'sqlite')('run on the worker thread after commits, and copy the pages into the database file', async () => {
    const { rows } = await sql<{ wal_autocheckpoint: number }>`PRAGMA wal_autocheckpoint`.execute(ts.store.db);
    expect(Number(rows[0]!.wal_autocheckpoint)).toBe(WRITER_AUTOCHECKPOINT_PAGES);
    const stats = checkpointStats(ts.store)!;
    const file = join(ts.location.dataDir, 'baton.sqlite');
    // Idle: nothing committed since the last pass, nothing to do.
    const settled = stats.runs;
    await new Promise((r) => setTimeout(r, 300));
    expect(stats.runs).toBe(settled);
    const before = statSync(file).size;

    // The most frames any checkpoint found in the WAL, sampled throughout. The last one alone may
    // find 0 (it did once, in a run of the whole suite): a commit that starts the WAL over
    // publishes a header of 0 frames before it writes its own (SQLite's walRestartHdr), and a
    // checkpoint on the other connection that reads the header then finds the WAL empty.
    let most = 0;
    const sampler = setInterval(() => (most = Math.max(most, stats.lastFrames)), 5);
    try {
      // About 2,000 pages of 4 KiB committed: under the backstop, so only the thread checkpoints.
      await engine.agents.create({ name: 'wal', max_parallel: 1, max_backlog: 10_000 }, 'test');
      const filler = 'x'.repeat(3_000);
      for (let i = 0; i < 20; i++) {
        await Promise.all(
          Array.from({ length: 100 }, (_, k) => engine.submit('wal', { message: `${i}.${k}`, payload: { filler } }, 'test')),
        );
      }
      await until('a checkpoint after the commits', () => stats.runs > settled);
      await until('the pages in the database file', () => statSync(file).size - before > 1_000 * 4096);
      // The file grows while the pass that copies the pages runs, before it reports the frames it
      // found: wait for that report rather than sample once more (no commit follows to start another).
      await until('the pass that copied them to report its frames', () => (most = Math.max(most, stats.lastFrames)) > 0);
    } finally {
      clearInterval(sampler);
    }
    expect(most).toBeGreaterThan(0);
  });

  it.runIf(STORE_KIND === 'sqlite')('let the WAL start over under steady writes, without the writer’s own checkpoint', async () => {
    // Steady writes never leave the thread's checkpoint with every frame copied, and SQLite starts
    // the WAL over only then: without the pass that holds the main connection's turn the WAL file
    // grew by every frame written (the writer's backstop, WRITER_AUTOCHECKPOINT_PAGES, is far off).
    const dir = mkdtempSync(join(tmpdir(), 'baton-test-wal-'));
    const file = join(dir, 'baton.sqlite');
    const store = openSqlite(file, { walRestartFrames: 300, checkpointEveryMs: 20 });
    try {
      await store.migrate();
      const steady = new Engine({ store, clock: manualClock(), nodeId: 'wal-restart' });
      await steady.agents.create({ name: 'steady', max_parallel: 1, max_backlog: 100_000 }, 'test');
      const stats = checkpointStats(store)!;
      const filler = 'x'.repeat(3_000);
      const frame = 4096 + 24;
      let largestWal = 0;
      const wal = () => statSync(`${file}-wal`, { throwIfNoEntry: false })?.size ?? 0;
      const restartsBefore = walRestarts(`${file}-wal`);
      // Eight submitters, each submitting again as soon as its last submit returns, for about 19,000
      // frames (each submit's payload is a page of its own): groups follow each other with no pause
      // for the thread's checkpoint to catch up in.
      let next = 0;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (next < 5_000) {
            await steady.submit('steady', { message: `${next++}`, payload: { filler } }, 'test');
            largestWal = Math.max(largestWal, wal());
          }
        }),
      );
      steady.close();
      // The WAL started over: the held passes (and only they: with the last checkpoint of a pass
      // not holding the turn it started over 0 times) left it with every frame copied while no
      // writer ran, and SQLite counts each restart in its header (about one a held pass, 26 to 29
      // run alone).
      expect(stats.held).toBeGreaterThan(0);
      expect(walRestarts(`${file}-wal`) - restartsBefore).toBeGreaterThan(0);
      // Started over, the file is reused from its start: its length is the longest stretch of frames
      // between two restarts, which a checkpoint found whole (CheckpointStats.mostFrames), not every
      // frame written (past 18,000 here). How long a stretch is depends on how soon the held pass
      // comes, after checkpoints whose syncs a busy machine slows (it reached 9,800 frames in a run
      // of the whole suite; about 1,000 run alone): measured, not assumed. The last commits' frames
      // are found by the pass after them.
      const header = 32;
      await until('a checkpoint that found every frame the file holds', () => header + stats.mostFrames * frame >= largestWal);
      expect(largestWal).toBeLessThanOrEqual(header + stats.mostFrames * frame);
      const { rows } = await sql<{ wal_autocheckpoint: number }>`PRAGMA wal_autocheckpoint`.execute(store.db);
      expect(Number(rows[0]!.wal_autocheckpoint)).toBe(WRITER_AUTOCHECKPOINT_PAGES);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.runIf(STORE_KIND === 'postgres')('are PostgreSQL’s own: the store runs none', () => {
    expect(checkpointStats(ts.store)).toBeUndefined();
  });
});
