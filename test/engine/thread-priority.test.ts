import { readdirSync, readFileSync } from 'node:fs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { canonicalJsonOffThread } from '../../src/engine/json-thread.ts';
import { openSqliteReader } from '../../src/store/sqlite-reader.ts';
import { WORKER_THREAD_NICE } from '../../src/store/thread-priority.js';

/** Each thread of this process (Linux: /proc/self/task) with its nice value (field 19 of its stat). */
function niceByThread(): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      const fields = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      out.set(Number(tid), Number(fields[16]));
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

/**
 * Baton's JSON thread and SQLite's read-only reader threads run at a lower
 * priority than the event loop, so that a busy worker does not take the loop's core from it; the
 * event loop's own thread keeps its priority.
 */
describe.runIf(process.platform === 'linux')('worker thread priority', () => {
  const dir = mkdtempSync(join(tmpdir(), 'baton-prio-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const mainNice = () => niceByThread().get(process.pid);

  it('the JSON thread and a SQLite reader thread run niced, the event loop does not', async () => {
    const before = mainNice();
    expect(await canonicalJsonOffThread(['{"a": 1}'])).toEqual(['{"a":1}']);
    const file = join(dir, 'r.db');
    new Database(file).exec('CREATE TABLE t (x INTEGER)');
    const reader = openSqliteReader(file);
    try {
      await reader
        .selectFrom('t' as never)
        .selectAll()
        .execute();
      // Two new threads at least (the JSON one may have started in an earlier test of this file's process).
      const niced = [...niceByThread()].filter(([tid, nice]) => tid !== process.pid && nice === WORKER_THREAD_NICE);
      expect(niced.length).toBeGreaterThanOrEqual(2);
      expect(mainNice()).toBe(before);
      expect(before).toBeLessThan(WORKER_THREAD_NICE);
    } finally {
      await reader.destroy();
    }
  });
});
