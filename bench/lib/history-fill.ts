/**
 * The history fast path: fill a Baton database with N past executions in minutes, for the
 * `history` scenario of `npm run bench` (bench/lib/history.ts). Benchmark-only; never used by
 * Baton itself.
 *
 * What it writes looks like what real traffic leaves behind (compare a row written by the
 * engine: submit → claim → complete):
 * - N terminal executions (95 % succeeded, 5 % failed with error_code / error_message), created
 *   uniformly over the last `days` days (default 35) on the given agents (`hist-000`…`hist-099`,
 *   made beforehand through the engine, so the agents table is the normal one). Each waited a
 *   little in the queue (exponential, mean 200 ms; longer when the agent's `max_parallel` seats
 *   were all taken), ran 50 ms – 2 min (log-uniform), attempt 1, a lease owner and token, a
 *   deadline, a last heartbeat; ~50 % carry a usage object, ~5 % a result of 2–4 KiB, the other
 *   succeeded rows a small result.
 * - exactly 3 execution events each, as the engine's triggers write them: null→queued
 *   (reason `created`), queued→running (`admitted`, with seats_in_use counted from the agent's
 *   running rows at that instant, never above its cap, and seat_cap), running→succeeded|failed
 *   (reason = the status or the error code). Event ids increase with event time across the
 *   whole history (events are merged in time order across batches), as they would have.
 * - one audit row per execution (`execution.create`, as submit writes).
 * - ~2 % with a few log lines (execution_logs + execution_log_heads with matching totals).
 *
 * How: straight into the database, not through the engine, in large multi-row INSERTs inside
 * transactions of `batch` executions (default 10,000). The event triggers on `executions`
 * are switched off for the fill and the events written explicitly (so they carry the times and
 * seats above instead of "now"):
 * - SQLite: a separate better-sqlite3 connection; each fill transaction drops every INSERT
 *   trigger on the tables it writes and re-creates it (from sqlite_master) before COMMIT, so the
 *   schema is never left without them; foreign_keys off and synchronous OFF on this connection
 *   only (the data is consistent by construction; a crash mid-fill just means refilling).
 * - PostgreSQL: one connection with `SET session_replication_role = replica` (no triggers, no
 *   foreign-key checks in this session) and `synchronous_commit = off`; rows go in as one JSON
 *   value per table per chunk (json_populate_recordset), in order (WITH ORDINALITY), so the
 *   BIGSERIAL event ids follow time.
 * Indexes stay in place during the fill (as they would have been while the history grew).
 * Afterwards: ANALYZE on both stores (PostgreSQL: VACUUM (ANALYZE), then CHECKPOINT); SQLite
 * checkpoints and truncates its WAL.
 *
 * Caveat: a trigger that maintains something besides events (a counter, say) would be
 * bypassed too. The seat and backlog counters count only running and queued rows, and the fill
 * writes finished ones; the append-only guards do not fire on INSERT.
 *
 * The store must already be migrated by the project's own migrate() (the caller opens it that
 * way), so the fill always writes into the current schema.
 */
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import pg from 'pg';
import { newExecutionId } from '../../src/domain/ids.ts';

export interface FillAgent {
  name: string;
  max_parallel: number;
  /** A keyed agent: each past task carries one of this many concurrency keys (on its admission event too). */
  keys?: number;
}

export interface FillOptions {
  n: number;
  agents: FillAgent[];
  /** History spans [now - days, now - 10 min]. */
  days: number;
  now: number;
  /** Executions per transaction. */
  batch: number;
  seed: number;
  log?: (line: string) => void;
}

export interface FillTarget {
  kind: 'sqlite' | 'postgres';
  /** SQLite file. */
  file?: string;
  /** PostgreSQL. */
  url?: string;
  schema?: string;
}

export interface FillResult {
  executions: number;
  events: number;
  audit: number;
  log_lines: number;
  with_logs: number;
  with_big_result: number;
  failed: number;
  oldest_created_at: number;
  newest_created_at: number;
  seconds: number;
  executions_per_s: number;
  analyze_seconds: number;
}

// ── deterministic generator ─────────────────────────────────────────────────

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** URL-safe random ids shaped like the engine's (prefix + 22 characters). */
function idPool() {
  let pool = randomBytes(1 << 16);
  let off = 0;
  return (prefix: string) => {
    if (off + 16 > pool.length) {
      pool = randomBytes(1 << 16);
      off = 0;
    }
    const s = prefix + pool.toString('base64url', off, off + 16);
    off += 16;
    return s;
  };
}

const WORDS =
  'fetch the quarterly report summarise open tickets triage inbox draft reply sync crm records check deploy status refresh embeddings classify documents translate notes reconcile invoices scan repository update dashboard'.split(
    ' ',
  );
const ERRORS: Array<[string, string]> = [
  ['tool_error', 'The tool call returned an error: upstream responded 502 Bad Gateway after 3 retries'],
  ['rate_limited', 'Model provider rate limit reached (429); retry after 20 s'],
  ['invalid_input', 'Payload field "document_url" is not a reachable URL'],
  ['timeout', 'The step "summarise" took longer than its 120 s budget'],
  ['agent_crashed', 'Worker process exited with code 137 (out of memory) while processing the batch'],
];

export interface GenExecution {
  row: Record<string, unknown>;
  events: Array<Record<string, unknown>>;
  audit: Record<string, unknown>;
  logs: Array<Record<string, unknown>>;
  head: Record<string, unknown> | null;
}

/**
 * Produces executions in creation order, chunk by chunk, and their events in global time
 * order (each chunk's events are held back until no later chunk can have an earlier one).
 */
export class HistoryGenerator {
  private rnd: () => number;
  private id = idPool();
  private start: number;
  private end: number;
  private made = 0;
  private chunkIndex = 0;
  private chunks: number;
  private pending: Array<Record<string, unknown> & { at: number; _k: number }> = [];
  private k = 0;
  /** Per agent: [started, completed] of admissions that may still be running. */
  private running: Array<Array<[number, number]>>;
  /** Per agent: the last admission's time (admission is first come, first served). */
  private lastStart: number[];
  readonly stats = { failed: 0, with_logs: 0, with_big_result: 0, log_lines: 0, events: 0 };

  constructor(private o: FillOptions) {
    this.rnd = mulberry32(o.seed);
    this.end = o.now - 10 * 60_000;
    this.start = o.now - o.days * 86_400_000;
    this.chunks = Math.max(1, Math.ceil(o.n / o.batch));
    this.running = o.agents.map(() => []);
    this.lastStart = o.agents.map(() => 0);
  }

  get oldest() {
    return this.start;
  }
  get newest() {
    return this.end;
  }

  /** Next chunk of executions (creation order) and the events that are now final (time order). */
  next(): { executions: GenExecution[]; events: Array<Record<string, unknown>>; done: boolean } | null {
    if (this.made >= this.o.n) {
      if (this.pending.length === 0) return null;
      const events = this.flush(Infinity);
      return { executions: [], events, done: true };
    }
    const size = Math.min(this.o.batch, this.o.n - this.made);
    const span = (this.end - this.start) / this.chunks;
    const lo = this.start + span * this.chunkIndex;
    const hi = lo + span;
    const times = Array.from({ length: size }, () => Math.floor(lo + this.rnd() * span)).sort((a, b) => a - b);
    const out: GenExecution[] = [];
    for (const created of times) out.push(this.one(created));
    this.made += size;
    this.chunkIndex++;
    const last = this.made >= this.o.n;
    return { executions: out, events: this.flush(last ? Infinity : Math.floor(hi)), done: false };
  }

  private flush(before: number) {
    this.pending.sort((a, b) => a.at - b.at || a._k - b._k);
    let i = 0;
    while (i < this.pending.length && this.pending[i]!.at < before) i++;
    const ready = this.pending.splice(0, i);
    for (const e of ready) delete (e as { _k?: number })._k;
    this.stats.events += ready.length;
    return ready;
  }

  private one(created: number): GenExecution {
    const r = this.rnd;
    const ai = Math.floor(r() * this.o.agents.length);
    const agent = this.o.agents[ai]!;
    const cap = Math.max(1, agent.max_parallel);
    const id = newExecutionId(created);
    // Queue wait, then a free seat (first come, first served by creation time).
    // Never before the agent's previous admission: then every run that could overlap this one
    // is already known when its seats are counted.
    let started = Math.max(created + 1 + Math.floor(-Math.log(1 - r()) * 200), this.lastStart[ai]! + 1);
    const runs = this.running[ai]!.filter(([, end]) => end > created);
    this.running[ai] = runs;
    for (;;) {
      const busy = runs.filter(([s, e]) => s <= started && e > started);
      if (busy.length < cap) break;
      started = Math.min(...busy.map(([, e]) => e)) + 1;
    }
    const seats = runs.filter(([s, e]) => s <= started && e > started).length + 1;
    this.lastStart[ai] = started;
    const duration = Math.floor(Math.exp(Math.log(50) + r() * (Math.log(120_000) - Math.log(50))));
    const completed = started + duration;
    runs.push([started, completed]);
    const failed = r() < 0.05;
    const bigResult = !failed && r() < 0.05 / 0.95;
    const withLogs = r() < 0.02;
    const owner = `worker-${ai}-${Math.floor(r() * 4)}`;
    const actor = 'key:hist';
    const [errCode, errMessage] = failed ? ERRORS[Math.floor(r() * ERRORS.length)]! : [null, null];
    const reason = errCode ?? 'succeeded';
    const words = 2 + Math.floor(r() * 5);
    const message = Array.from({ length: words }, () => WORDS[Math.floor(r() * WORDS.length)]).join(' ');
    let result: string | null = null;
    if (bigResult) {
      const target = 2048 + Math.floor(r() * 2048);
      const items: Array<{ title: string; score: number; text: string }> = [];
      let size = 40;
      while (size < target) {
        const text = Array.from({ length: 8 + Math.floor(r() * 10) }, () => WORDS[Math.floor(r() * WORDS.length)]).join(' ');
        items.push({ title: `item ${items.length + 1}`, score: Math.round(r() * 1000) / 1000, text });
        size += text.length + 40;
      }
      result = JSON.stringify({ summary: message, items });
      this.stats.with_big_result++;
    } else if (!failed) {
      result = JSON.stringify({ ok: true, items: Math.floor(r() * 50) });
    }
    if (failed) this.stats.failed++;
    const usage =
      r() < 0.5
        ? JSON.stringify({
            input_tokens: Math.floor(r() * 20_000),
            output_tokens: Math.floor(r() * 4000),
            cost_usd: Math.round(r() * 5000) / 100_000,
          })
        : null;
    const heartbeat = started + Math.floor(duration / 10_000) * 10_000;
    const flowKey = agent.keys ? `k-${Math.floor(r() * agent.keys)}` : null;
    const row: Record<string, unknown> = {
      id,
      agent: agent.name,
      schedule_id: null,
      scheduled_for: null,
      trigger_kind: 'api',
      origin: '{"key_id":"key_hist"}',
      message,
      payload: JSON.stringify({ task: message, n: this.made + 1, ref: `T-${Math.floor(r() * 1e6)}` }),
      priority: 0,
      run_after: null,
      status: failed ? 'failed' : 'succeeded',
      attempt: 1,
      max_redeliveries: 3,
      timeout_seconds: 900,
      lease_ttl_seconds: 30,
      lease_owner: owner,
      lease_token: this.id('ls_'),
      lease_expires_at: null,
      heartbeat_at: heartbeat,
      deadline_at: started + 900_000,
      cancel_requested_at: null,
      created_at: created,
      queued_at: created,
      started_at: started,
      completed_at: completed,
      duration_ms: duration,
      result,
      error_code: errCode,
      error_message: errMessage,
      usage,
      retry_of: null,
      idempotency_key: null,
      retry_policy: null,
      retry_number: 0,
      retry_root: null,
      webhook_id: null,
      serial_key: null,
      flow_key: flowKey,
      changed_at: completed,
      changed_by: actor,
      change_reason: reason,
    };
    const ev = (
      at: number,
      from: string | null,
      to: string,
      by: string,
      why: string,
      attempt: number,
      s: number | null,
      c: number | null,
    ) => ({
      execution_id: id,
      agent: agent.name,
      from_status: from,
      to_status: to,
      at,
      actor: by,
      reason: why,
      attempt,
      seats_in_use: s,
      seat_cap: c,
      flow_key: flowKey,
      _k: this.k++,
    });
    const events = [
      ev(created, null, 'queued', actor, 'created', 0, null, null),
      ev(started, 'queued', 'running', owner, 'admitted', 1, seats, agent.max_parallel),
      ev(completed, 'running', row.status as string, actor, reason, 1, null, null),
    ];
    this.pending.push(...events);
    const audit = { at: created, actor, action: 'execution.create', subject: agent.name, execution_id: id, detail: '{"trigger":"api"}' };
    const logs: Array<Record<string, unknown>> = [];
    let head: Record<string, unknown> | null = null;
    if (withLogs) {
      const lines = 3 + Math.floor(r() * 10);
      let bytes = 0;
      for (let s = 1; s <= lines; s++) {
        const stream = failed && s === lines ? 'stderr' : 'stdout';
        const text = `${new Date(started + s * 10).toISOString()} ${stream === 'stderr' ? 'ERROR' : 'INFO'} ${Array.from({ length: 5 + Math.floor(r() * 20) }, () => WORDS[Math.floor(r() * WORDS.length)]).join(' ')}`;
        bytes += Buffer.byteLength(text);
        logs.push({
          execution_id: id,
          seq: s,
          at: Math.min(completed, started + Math.floor((duration * s) / (lines + 1))),
          stream,
          line: text,
        });
      }
      head = { execution_id: id, lines, bytes, truncated: 0 };
      this.stats.with_logs++;
      this.stats.log_lines += lines;
    }
    return { row, events: events as never, audit, logs, head };
  }
}

// ── writers ─────────────────────────────────────────────────────────────────

export async function fillHistory(target: FillTarget, o: FillOptions): Promise<FillResult> {
  const t0 = performance.now();
  const gen = new HistoryGenerator(o);
  const writer = target.kind === 'sqlite' ? sqliteWriter(target.file!) : await postgresWriter(target.url!, target.schema!);
  let executions = 0;
  let audit = 0;
  let lastLog = t0;
  try {
    for (let chunk = gen.next(); chunk; chunk = gen.next()) {
      await writer.write(chunk.executions, chunk.events);
      executions += chunk.executions.length;
      audit += chunk.executions.length;
      const now = performance.now();
      if (o.log && now - lastLog > 10_000) {
        lastLog = now;
        o.log(
          `  filled ${executions.toLocaleString('en-US')} executions (${Math.round(executions / ((now - t0) / 1000)).toLocaleString('en-US')}/s)`,
        );
      }
    }
    const seconds = (performance.now() - t0) / 1000;
    const a0 = performance.now();
    await writer.finish();
    const analyzeSeconds = (performance.now() - a0) / 1000;
    return {
      executions,
      events: gen.stats.events,
      audit,
      log_lines: gen.stats.log_lines,
      with_logs: gen.stats.with_logs,
      with_big_result: gen.stats.with_big_result,
      failed: gen.stats.failed,
      oldest_created_at: gen.oldest,
      newest_created_at: gen.newest,
      seconds: Math.round(seconds * 10) / 10,
      executions_per_s: Math.round(executions / seconds),
      analyze_seconds: Math.round(analyzeSeconds * 10) / 10,
    };
  } finally {
    await writer.close();
  }
}

interface Writer {
  write(executions: GenExecution[], events: Array<Record<string, unknown>>): Promise<void>;
  finish(): Promise<void>;
  close(): Promise<void>;
}

const FILLED = ['executions', 'execution_events', 'audit_log', 'execution_logs', 'execution_log_heads'];

function sqliteWriter(file: string): Writer {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = OFF');
  db.pragma('foreign_keys = OFF');
  db.pragma('cache_size = -262144'); // 256 MiB
  db.pragma('busy_timeout = 5000');
  // Every INSERT trigger on the tables the fill writes (today: the executions event trigger).
  const triggers = db
    .prepare(`SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN (${FILLED.map(() => '?').join(',')})`)
    .all(...FILLED) as Array<{ name: string; sql: string }>;
  const insertTriggers = triggers.filter((t) => /\bINSERT\s+ON\b/i.test(t.sql));
  const stmts = new Map<string, Database.Statement>();
  function insert(table: string, rows: Array<Record<string, unknown>>) {
    if (rows.length === 0) return;
    const cols = Object.keys(rows[0]!);
    const per = Math.max(1, Math.floor(30_000 / cols.length));
    for (let i = 0; i < rows.length; i += per) {
      const part = rows.slice(i, i + per);
      const key = `${table}:${part.length}`;
      let st = stmts.get(key);
      if (!st) {
        const tuple = `(${cols.map(() => '?').join(',')})`;
        st = db.prepare(`INSERT INTO ${table} (${cols.join(',')}) VALUES ${Array.from({ length: part.length }, () => tuple).join(',')}`);
        stmts.set(key, st);
      }
      const values: unknown[] = [];
      for (const r of part) for (const c of cols) values.push(r[c]);
      st.run(values);
    }
  }
  const tx = db.transaction((executions: GenExecution[], events: Array<Record<string, unknown>>) => {
    for (const t of insertTriggers) db.exec(`DROP TRIGGER ${t.name}`);
    insert(
      'executions',
      executions.map((e) => e.row),
    );
    insert('execution_events', events);
    insert(
      'audit_log',
      executions.map((e) => e.audit),
    );
    insert(
      'execution_logs',
      executions.flatMap((e) => e.logs),
    );
    insert(
      'execution_log_heads',
      executions.flatMap((e) => (e.head ? [e.head] : [])),
    );
    for (const t of insertTriggers) db.exec(t.sql);
  });
  return {
    async write(executions, events) {
      tx(executions, events);
    },
    async finish() {
      db.exec('ANALYZE');
      db.pragma('wal_checkpoint(TRUNCATE)');
    },
    async close() {
      db.close();
    },
  };
}

async function postgresWriter(url: string, schema: string): Promise<Writer> {
  const c = new pg.Client({ connectionString: url, options: `-c search_path=${schema}` });
  await c.connect();
  await c.query('SET session_replication_role = replica');
  await c.query('SET synchronous_commit = off');
  async function insert(table: string, rows: Array<Record<string, unknown>>) {
    if (rows.length === 0) return;
    const cols = Object.keys(rows[0]!);
    for (let i = 0; i < rows.length; i += 5000) {
      const part = rows.slice(i, i + 5000);
      await c.query(
        `INSERT INTO ${table} (${cols.join(',')}) SELECT ${cols.join(',')} FROM json_populate_recordset(NULL::${table}, $1::json) WITH ORDINALITY AS t ORDER BY ordinality`,
        [JSON.stringify(part)],
      );
    }
  }
  return {
    async write(executions, events) {
      await c.query('BEGIN');
      try {
        await insert(
          'executions',
          executions.map((e) => e.row),
        );
        await insert('execution_events', events);
        await insert(
          'audit_log',
          executions.map((e) => e.audit),
        );
        await insert(
          'execution_logs',
          executions.flatMap((e) => e.logs),
        );
        await insert(
          'execution_log_heads',
          executions.flatMap((e) => (e.head ? [e.head] : [])),
        );
        await c.query('COMMIT');
      } catch (err) {
        await c.query('ROLLBACK').catch(() => {});
        throw err;
      }
    },
    async finish() {
      await c.query('SET session_replication_role = origin');
      // This schema's tables only (a bare ANALYZE would visit every schema in the database).
      const t = await c.query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = $2', [
        schema,
        'BASE TABLE',
      ]);
      // VACUUM too, then a checkpoint: the store is left as a settled one of that age would be (hint
      // bits and visibility map set, autovacuum with nothing left to do, the fill's pages written
      // out), as SQLite's is after its checkpoint — so the probes and the prune's idle baseline do
      // not run beside the fill's own write-back.
      for (const r of t.rows) await c.query(`VACUUM (ANALYZE) ${schema}.${r.table_name}`);
      await c.query('CHECKPOINT');
    },
    async close() {
      await c.end();
    },
  };
}
