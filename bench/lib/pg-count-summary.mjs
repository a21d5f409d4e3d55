/**
 * Summarises a BENCH_PG_COUNT_FILE written by pg-count.mjs: the change from the last line before
 * the first submit call after the agents were created to the last line, per task
 * (`node bench/lib/pg-count-summary.mjs FILE TASKS`). The server's start-up sends a submit of its
 * own before the bench creates its agents; counted from there, the creation of W1-users' 100
 * agents added about 0.26 statements a task at 5,000 tasks (PostgreSQL, 2026-12-07).
 */
import { readFileSync } from 'node:fs';

const [file, tasksArg] = process.argv.slice(2);
const tasks = Number(tasksArg);
const lines = readFileSync(file, 'utf8')
  .trim()
  .split('\n')
  .map((l) => JSON.parse(l));
const submits = (l) =>
  Object.entries(l.kinds)
    .filter(([k]) => /baton_submit/.test(k))
    .reduce((s, [, n]) => s + n, 0);
const created = (l) =>
  Object.entries(l.kinds)
    .filter(([k]) => /insert into "agents"/.test(k))
    .reduce((s, [, n]) => s + n, 0);
const lastCreation = lines.findLastIndex((l, j) => j > 0 && created(l) > created(lines[j - 1]));
const i = Math.max(0, lines.findIndex((l, j) => j > lastCreation && j > 0 && submits(l) > submits(lines[j - 1])) - 1);
const a = lines[i];
const b = lines[lines.length - 1];
const per = (x, y) => ((y - x) / tasks).toFixed(3);
console.log(`over ${((b.t - a.t) / 1000).toFixed(1)} s, per task:`);
console.log(`  server CPU ms ${per(a.cpu_ms, b.cpu_ms)}  backend CPU ms ${per(a.backend_ticks * 10, b.backend_ticks * 10)}`);
console.log(
  `  statements ${per(a.statements, b.statements)}  autocommit ${per(a.autocommit, b.autocommit)}  BEGIN ${per(a.begin, b.begin)}  COMMIT ${per(a.commit, b.commit)}`,
);
console.log(`  commits (autocommit + COMMIT) ${per(a.autocommit + a.commit, b.autocommit + b.commit)}`);
// A transaction's BEGIN goes out with its first statement (src/store/postgres-connection.ts), not a round trip of its own.
console.log(`  round trips (statements less BEGINs) ${per(a.statements - a.begin, b.statements - b.begin)}`);
const keys = new Set([...Object.keys(a.kinds), ...Object.keys(b.kinds)]);
const rows = [...keys]
  .map((k) => [k, (b.kinds[k] ?? 0) - (a.kinds[k] ?? 0)])
  .filter(([, n]) => n > 0)
  .sort((x, y) => y[1] - x[1]);
for (const [k, n] of rows) console.log(`  ${(n / tasks).toFixed(3).padStart(7)}  ${n.toString().padStart(7)}  ${k}`);
for (const field of ['items', 'states']) {
  const ka = a[field] ?? {};
  const kb = b[field] ?? {};
  for (const k of Object.keys(kb).sort()) {
    const n = kb[k] - (ka[k] ?? 0);
    if (n > 0) console.log(`  ${field} ${(n / tasks).toFixed(3).padStart(7)}  ${n.toString().padStart(7)}  ${k}`);
  }
}
