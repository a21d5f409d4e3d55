// The SQLite reader's thread: one read-only connection to the database file, answering the
// statements src/store/sqlite-reader.ts sends. Plain JavaScript, so it loads in any worker
// (no TypeScript loader is inherited by worker threads under every runner).
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

const db = new Database(workerData.file, { readonly: true, fileMustExist: true });
db.pragma(`busy_timeout = ${workerData.busyTimeoutMs}`);
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
    const stmt = prepare(sql);
    if (stmt.reader) {
      parentPort.postMessage({ id, rows: stmt.all(parameters) });
    } else {
      // BEGIN / COMMIT / ROLLBACK of a snapshot; the connection is read-only, so nothing else runs.
      const { changes } = stmt.run(parameters);
      parentPort.postMessage({ id, rows: [], changes });
    }
  } catch (err) {
    parentPort.postMessage({ id, error: { message: err?.message ?? String(err), code: err?.code } });
  }
});
