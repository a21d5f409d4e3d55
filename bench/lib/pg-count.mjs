/**
 * Diagnosis preload for a `baton up` process on PostgreSQL (`--import ./bench/lib/pg-count.mjs`,
 * e.g. through BENCH_SERVER_NODE_ARGS): counts the statements every pg client of the process
 * sends, by kind (the first baton_* function a text calls, else its first words), which of them
 * ran outside a transaction (each its own commit), the BEGINs and COMMITs, and the CPU of the
 * backends serving those clients (their /proc stat, by the backend pid each connection reports).
 * Every 200 ms, while anything changed, it appends one JSON line to $BENCH_PG_COUNT_FILE:
 * { t, cpu_ms (this process), backend_ticks, statements, autocommit, begin, commit, kinds, items
 * (per baton_* call with an array first argument, its length summed: the agents of a claim call),
 * states (rows answered with a claim_state, by function and state; `nothing`: agents answered with
 * no row; `calls`) }.
 */
import { appendFileSync, readFileSync } from 'node:fs';
import pg from 'pg';

const file = process.env.BENCH_PG_COUNT_FILE;
const kinds = new Map();
const state = { statements: 0, autocommit: 0, begin: 0, commit: 0 };
const inTx = new WeakSet();
const backends = new Map();
/** Per baton_* function called with an array first argument: the length of those arrays (agents, items). */
const items = new Map();
/** Rows answered with a claim_state (baton_claim_many, baton_submit_claim), by function and state. */
const states = new Map();

function kindOf(text) {
  const head = text.trimStart().slice(0, 12).toUpperCase();
  if (head.startsWith('BEGIN') || head.startsWith('START TRANSA')) return 'BEGIN';
  if (head.startsWith('COMMIT')) return 'COMMIT';
  if (head.startsWith('ROLLBACK')) return 'ROLLBACK';
  const f = /\b(baton_[a-z_]+|pg_notify)\s*\(/.exec(text);
  if (f) return f[1];
  return text.replace(/\s+/g, ' ').trim().slice(0, 60);
}

const proto = pg.Client.prototype;
const query = proto.query;
proto.query = function (config, values, callback) {
  const text = typeof config === 'string' ? config : config?.text;
  if (typeof text === 'string') {
    const k = kindOf(text);
    state.statements++;
    if (k === 'BEGIN') {
      state.begin++;
      inTx.add(this);
    } else if (k === 'COMMIT' || k === 'ROLLBACK') {
      if (k === 'COMMIT') state.commit++;
      inTx.delete(this);
    } else if (!inTx.has(this)) state.autocommit++;
    const key = (inTx.has(this) || k === 'COMMIT' || k === 'ROLLBACK' ? 'tx: ' : 'auto: ') + k;
    kinds.set(key, (kinds.get(key) ?? 0) + 1);
    if (this.processID && !backends.has(this.processID)) backends.set(this.processID, 0);
    // A baton_* call's agents (its first argument, where it is an array) and its rows by claim_state.
    const args = values ?? config?.values;
    if (k.startsWith('baton_') && Array.isArray(args?.[0])) items.set(k, (items.get(k) ?? 0) + args[0].length);
    const out = query.call(this, config, values, callback);
    if (k.startsWith('baton_') && typeof out?.then === 'function') {
      out.then(
        (r) => {
          const took = new Set();
          const count = (key) => states.set(key, (states.get(key) ?? 0) + 1);
          for (const row of r?.rows ?? []) {
            if (typeof row.claim_state !== 'string') continue;
            count(`${k} ${row.claim_state}`);
            if (row.claim_state === 'row') took.add(row.claim_agent);
            // An agent's answer that ends with no row taken: a look that found nothing.
            else if ((row.claim_state === 'decided' || row.claim_state === 'empty') && !took.has(row.claim_agent)) count(`${k} nothing`);
          }
          if (Array.isArray(r?.rows) && r.rows.some((row) => typeof row.claim_state === 'string')) count(`${k} calls`);
        },
        () => undefined,
      );
    }
    return out;
  }
  return query.call(this, config, values, callback);
};

function ticks(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return null;
  }
}

let last = -1;
if (file) {
  setInterval(() => {
    let backend = 0;
    for (const [pid, seen] of backends) {
      const t = ticks(pid);
      if (t !== null) backends.set(pid, Math.max(seen, t));
      backend += backends.get(pid);
    }
    if (state.statements === last) return;
    last = state.statements;
    const u = process.cpuUsage();
    appendFileSync(
      file,
      JSON.stringify({
        t: Date.now(),
        cpu_ms: (u.user + u.system) / 1000,
        backend_ticks: backend,
        ...state,
        kinds: Object.fromEntries(kinds),
        items: Object.fromEntries(items),
        states: Object.fromEntries(states),
      }) + '\n',
    );
  }, 200).unref();
}
