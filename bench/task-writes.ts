/**
 * What a W1-users task's writes cost SQLite itself, on the live schema (src/store/schema.sqlite.sql),
 * without Baton's JavaScript: per task the submit's insert (its triggers write the event and the
 * backlog counter) and audit row, the admission's update and the completion's update (each with
 * its event), in groups of 10 tasks a BEGIN IMMEDIATE … COMMIT, every statement in its own
 * SAVEPOINT as the group commit runs them (src/store/sqlite-group-commit.ts), over 100 agents.
 * Two databases in one process, sent groups in turn (A B B A …): A has the schema as it is, B the
 * schema with what `variant` says: `drop:<index>[,<index>…]` drops indexes, `nosavepoint` runs
 * each statement outside a savepoint. Reports CPU µs a task of each side and the WAL frames a
 * task (each a page; checkpoints off, so the WAL holds every frame written).
 *
 *   node --import tsx bench/task-writes.ts <variant> [groups=3000]
 */
import Database from 'better-sqlite3';
import { mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const variant = process.argv[2] ?? 'none';
const GROUPS = Number(process.argv[3] ?? 3000);
const PER_GROUP = 10;
const schema = readFileSync(new URL('../src/store/schema.sqlite.sql', import.meta.url), 'utf8');

function side(b: boolean) {
  const dir = mkdtempSync(join(tmpdir(), 'task-writes-'));
  const db = new Database(join(dir, 'a.sqlite'));
  // The main connection's pragmas (src/store/sqlite-connection.ts), checkpoints off.
  for (const p of ['journal_mode = WAL', 'synchronous = NORMAL', 'foreign_keys = ON', 'temp_store = MEMORY', 'wal_autocheckpoint = 0'])
    db.pragma(p);
  db.exec(schema);
  if (b && variant.startsWith('drop:')) for (const ix of variant.slice(5).split(',')) db.exec(`DROP INDEX ${ix}`);
  const savepoints = !(b && variant === 'nosavepoint');
  const agent = db.prepare(
    `INSERT INTO agents (name, max_parallel, max_backlog, timeout_seconds, lease_ttl_seconds, max_redeliveries, delivery, created_at, updated_at)
     VALUES (?, 3, 1000000, 60, 30, 3, 'pull', 0, 0)`,
  );
  for (let i = 0; i < 100; i++) agent.run(`a${i}`);
  const s = {
    insert: db.prepare(
      `INSERT INTO executions (id, agent, trigger_kind, origin, message, payload, priority, status, attempt, max_redeliveries,
         timeout_seconds, lease_ttl_seconds, created_at, queued_at, changed_at, changed_by)
       VALUES (?, ?, 'api', '{"key_id":"k"}', 'noop', '{"i":1}', 0, 'queued', 0, 3, 60, 30, ?, ?, ?, 'key:k')`,
    ),
    audit: db.prepare(
      `INSERT INTO audit_log (at, actor, action, subject, execution_id, detail) VALUES (?, 'key:k', 'execution.create', ?, ?, NULL)`,
    ),
    admit: db.prepare(
      `UPDATE executions SET status = 'running', attempt = attempt + 1, lease_owner = 'w', lease_token = ?, lease_expires_at = ?,
         heartbeat_at = ?, started_at = ?, deadline_at = ?, changed_at = ?, changed_by = 'w', change_reason = 'admitted'
       WHERE id = ? AND status = 'queued'`,
    ),
    complete: db.prepare(
      `UPDATE executions SET status = 'succeeded', completed_at = ?, duration_ms = ? - started_at, lease_expires_at = NULL,
         result = '{"ok":true}', changed_at = ?, changed_by = 'w', change_reason = 'succeeded'
       WHERE id = ? AND lease_token = ? AND status IN ('running', 'queued')`,
    ),
    begin: db.prepare('BEGIN IMMEDIATE'),
    commit: db.prepare('COMMIT'),
    savepoint: db.prepare('SAVEPOINT member'),
    release: db.prepare('RELEASE member'),
  };
  const member = (f: () => void) => {
    if (savepoints) s.savepoint.run();
    f();
    if (savepoints) s.release.run();
  };
  let n = 0;
  const ids: string[] = [];
  // A task is admitted 10 tasks after its submit and completed 10 after that, as W1-users' backlog runs.
  const group = () => {
    s.begin.run();
    for (let i = 0; i < PER_GROUP; i++) {
      const id = `x${String(n).padStart(12, '0')}`;
      const now = 1_800_000_000_000 + n;
      const a = `a${n % 100}`;
      n++;
      member(() => {
        s.insert.run(id, a, now, now, now);
        s.audit.run(now, a, id);
      });
      ids.push(id);
      const up = ids[ids.length - 11];
      if (up) member(() => s.admit.run(`t${up}`, now + 30_000, now, now, now + 60_000, now, up));
      const done = ids[ids.length - 21];
      if (done) member(() => s.complete.run(now, now, now, done, `t${done}`));
    }
    s.commit.run();
  };
  const wal = () => statSync(join(dir, 'a.sqlite-wal')).size;
  return { group, wal, pageSize: Number(db.pragma('page_size', { simple: true })) };
}

const sides = { A: side(false), B: side(true) };
for (let i = 0; i < 200; i++) (sides.A.group(), sides.B.group());
const cpu = { A: 0, B: 0 };
const wal0 = { A: sides.A.wal(), B: sides.B.wal() };
for (let g = 0; g < GROUPS; g++) {
  for (const k of (g % 2 ? ['B', 'A'] : ['A', 'B']) as Array<'A' | 'B'>) {
    const c0 = process.cpuUsage();
    sides[k].group();
    const c = process.cpuUsage(c0);
    cpu[k] += c.user + c.system;
  }
}
const tasks = GROUPS * PER_GROUP;
const frames = (k: 'A' | 'B') => +((sides[k].wal() - wal0[k]) / (sides[k].pageSize + 24) / tasks).toFixed(2);
console.log(
  JSON.stringify({
    variant,
    A_us_per_task: +(cpu.A / tasks).toFixed(1),
    B_us_per_task: +(cpu.B / tasks).toFixed(1),
    ratio: +(cpu.B / cpu.A).toFixed(3),
    A_wal_frames_per_task: frames('A'),
    B_wal_frames_per_task: frames('B'),
    load: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' '),
  }),
);
