import { closeSync, openSync } from 'node:fs';
import Database from 'better-sqlite3';

/** What `baton up` holds on a SQLite store while it serves it. */
export interface StoreLock {
  release(): void;
}

/**
 * One `baton up` per SQLite file: the store is built for a single process (its wake-ups, group
 * commit and background passes live in that process), and a second server on the same file would
 * serve beside the first without either knowing. The lock is an exclusive lock on a file of its
 * own beside the database (`<file>.lock`), taken through SQLite's locking (locking_mode=EXCLUSIVE
 * keeps it until the connection closes): the operating system drops it when the process ends in
 * any way, SIGKILL included, so there is nothing stale to clean up. Other openers of the database
 * (`baton migrate`, a backup, the CLI) never take it.
 */
export function lockSqliteStore(file: string): StoreLock {
  const lockFile = `${file}.lock`;
  closeSync(openSync(lockFile, 'a', 0o600));
  const db = new Database(lockFile);
  try {
    db.pragma('busy_timeout = 0');
    db.pragma('locking_mode = EXCLUSIVE');
    // The first write takes the exclusive lock; in this mode it is kept after the commit.
    db.exec('CREATE TABLE IF NOT EXISTS holder (pid INTEGER NOT NULL, since INTEGER NOT NULL)');
    db.exec('BEGIN EXCLUSIVE');
    db.prepare('DELETE FROM holder').run();
    db.prepare('INSERT INTO holder (pid, since) VALUES (?, ?)').run(process.pid, Date.now());
    db.exec('COMMIT');
  } catch (err) {
    db.close();
    if ((err as { code?: string }).code === 'SQLITE_BUSY')
      throw new Error(
        `another baton up is serving this SQLite store (${file}): one process per SQLite file; ` +
          'stop it first, or give this one its own BATON_DATA_DIR (several processes share a store on PostgreSQL)',
        { cause: err },
      );
    throw err;
  }
  return { release: () => db.close() };
}
