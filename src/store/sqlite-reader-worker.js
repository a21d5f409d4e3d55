// A SQLite worker thread: one connection to the database file (read-only for the reader, or the
// pruner's read-write one), answering the statements src/store/sqlite-reader.ts sends. Plain
// JavaScript, so it loads in any worker (no TypeScript loader is inherited by worker threads
// under every runner).
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

const db = new Database(workerData.file, { readonly: workerData.readonly, fileMustExist: true });
db.pragma(`busy_timeout = ${workerData.busyTimeoutMs}`);
if (!workerData.readonly) {
  // As the main connection (sqlite.ts); checkpoints are the caller's own statements.
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('wal_autocheckpoint = 0');
}
const prepared = new Map();

function prepare(text) {
  let stmt = prepared.get(text);
  if (!stmt) {
    if (prepared.size >= 500) prepared.clear();
    stmt = db.prepare(text);
    prepared.set(text, stmt);
  }
  return stmt;
}

parentPort.on('message', ({ id, sql, parameters }) => {
  try {
    // A PRAGMA goes through pragma(), which steps it to the end: run() would step it once, and
    // incremental_vacuum frees one page per step.
    const pragma = /^\s*PRAGMA\s+(.*)$/is.exec(sql);
    if (pragma && !parameters?.length) {
      parentPort.postMessage({ id, rows: db.pragma(pragma[1]) });
      return;
    }
    const stmt = prepare(sql);
    if (stmt.reader) {
      parentPort.postMessage({ id, rows: stmt.all(parameters) });
    } else {
      // BEGIN / COMMIT / ROLLBACK, and on the writer thread the pruner's statements without RETURNING.
      const { changes } = stmt.run(parameters);
      parentPort.postMessage({ id, rows: [], changes });
    }
  } catch (err) {
    parentPort.postMessage({ id, error: { message: err?.message ?? String(err), code: err?.code } });
  }
});
