// A SQLite worker thread: one connection to the database file (read-only for the reader, or the
// pruner's read-write one), answering the statements src/store/sqlite-reader.ts sends. Plain
// JavaScript, so it loads in any worker (no TypeScript loader is inherited by worker threads
// under every runner).
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { lowerThisThreadsPriority } from './thread-priority.js';

// A reader yields its core to the event loop. The read-write connection keeps its priority: it
// runs the background WAL checkpoints, and one starved by busy cores lets the WAL grow past its
// bound while the main connection keeps committing.
if (workerData.readonly) lowerThisThreadsPriority();

const db = new Database(workerData.file, { readonly: workerData.readonly, fileMustExist: true });
db.pragma(`busy_timeout = ${workerData.busyTimeoutMs}`);
if (!workerData.readonly) {
  // As the main connection (sqlite.ts); checkpoints are the caller's own statements.
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('wal_autocheckpoint = 0');
  // A prune statement deletes from tables whose triggers may abort it, so SQLite keeps the old
  // image of every page it changes in a statement journal; past 64 KiB that spills to a temporary
  // file, written page by page. In memory instead: a long sweep ran markedly faster so.
  db.pragma('temp_store = MEMORY');
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

function run(sql, parameters) {
  // A PRAGMA goes through pragma(), which steps it to the end: run() would step it once, and
  // incremental_vacuum frees one page per step.
  const pragma = /^\s*PRAGMA\s+(.*)$/is.exec(sql);
  if (pragma && !parameters?.length) return { rows: db.pragma(pragma[1]) };
  const stmt = prepare(sql);
  if (stmt.reader) return { rows: stmt.all(parameters) };
  // BEGIN / COMMIT / ROLLBACK, and on the writer thread the pruner's statements without RETURNING.
  return { rows: [], changes: stmt.run(parameters).changes };
}

// One statement ({ sql, parameters }), or several in order ({ batch }: one message, one reply;
// the first that fails ends it).
parentPort.on('message', ({ id, sql, parameters, batch }) => {
  try {
    if (batch) parentPort.postMessage({ id, results: batch.map((q) => run(q.sql, q.parameters)) });
    else parentPort.postMessage({ id, ...run(sql, parameters) });
  } catch (err) {
    parentPort.postMessage({ id, error: { message: err?.message ?? String(err), code: err?.code } });
  }
});
