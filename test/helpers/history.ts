/**
 * Seed a store with a long, realistic history quickly (retention tests, the retention bench and
 * the SIGKILL fixture): finished executions with three events each, a result of a few KiB, log
 * lines on every third one, an idempotency key on every tenth, and some retry chains.
 */
import { randomBytes } from 'node:crypto';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import type { NewExecution } from '../../src/store/schema.ts';

export interface SeedOptions {
  count: number;
  agent?: string;
  /** completed_at of the oldest row; each next row is `stepMs` later. */
  from: number;
  stepMs?: number;
  /** Bytes of the result JSON (default ~2 KiB). */
  resultBytes?: number;
  /** Every n-th execution gets log lines (default 3; 0 none). */
  logsEvery?: number;
  /** Every n-th execution gets an idempotency key (default 10; 0 none). */
  keysEvery?: number;
  /** Every n-th execution heads a retry chain of two (default 0: none). */
  chainsEvery?: number;
  /** Rows per transaction. */
  chunk?: number;
}

// Words for result text: compresses about as well as an agent's prose (PostgreSQL compresses
// large values; a run of one letter would make its rows look ten times smaller than real ones).
const WORDS =
  'the report section table revenue quarter growth customer churn forecast model region sales cost margin risk summary finding source page trend chart value increase decrease compared previous year total'.split(
    ' ',
  );
function prose(bytes: number): string {
  let out = '';
  while (out.length < bytes)
    out +=
      WORDS[Math.floor(Math.random() * WORDS.length)] +
      (Math.random() < 0.1 ? '. ' : ' ') +
      (Math.random() < 0.05 ? String(Math.floor(Math.random() * 1e6)) + ' ' : '');
  return out.slice(0, bytes);
}

let serial = 0;
const newId = () => `ex_seed${(serial++).toString(36).padStart(6, '0')}${randomBytes(8).toString('hex')}`;

export async function seedHistory(store: StoreAdapter, o: SeedOptions): Promise<string[]> {
  const agent = o.agent ?? 'seeded';
  const step = o.stepMs ?? 1;
  const filler = prose(Math.max(0, (o.resultBytes ?? 2048) - 40));
  const logsEvery = o.logsEvery ?? 3;
  const keysEvery = o.keysEvery ?? 10;
  const chainsEvery = o.chainsEvery ?? 0;
  const chunk = o.chunk ?? 1000;
  await store.db
    .insertInto('agents')
    .values({
      name: agent,
      max_parallel: 4,
      max_backlog: 100,
      timeout_seconds: 900,
      lease_ttl_seconds: 30,
      max_redeliveries: 3,
      delivery: 'pull',
      push_url: null,
      push_secret: null,
      description: null,
      created_at: o.from,
      updated_at: o.from,
    })
    .onConflict((oc) => oc.column('name').doNothing())
    .execute();
  const ids: string[] = [];
  for (let start = 0; start < o.count; start += chunk) {
    const n = Math.min(chunk, o.count - start);
    const rows: NewExecution[] = [];
    const retries: NewExecution[] = [];
    for (let i = 0; i < n; i++) {
      const k = start + i;
      const done = o.from + k * step;
      const id = newId();
      ids.push(id);
      const row: NewExecution = {
        id,
        agent,
        schedule_id: null,
        scheduled_for: null,
        trigger_kind: 'api',
        origin: JSON.stringify({ key_id: 'k_seed', address: '127.0.0.1' }),
        message: `summarise report ${k}`,
        payload: JSON.stringify({ report: k, url: `https://example.com/reports/${k}`, options: { depth: 2, lang: 'en' } }),
        priority: 0,
        run_after: null,
        status: chainsEvery && k % chainsEvery === 0 ? 'failed' : 'succeeded',
        attempt: 1,
        max_redeliveries: 3,
        timeout_seconds: 900,
        lease_ttl_seconds: 30,
        lease_owner: 'worker:seed',
        lease_token: randomBytes(16).toString('hex'),
        lease_expires_at: done + 30_000,
        heartbeat_at: done - 500,
        deadline_at: done + 800_000,
        cancel_requested_at: null,
        created_at: done - 2000,
        queued_at: done - 2000,
        started_at: done - 1500,
        completed_at: done,
        duration_ms: 1500,
        result: JSON.stringify({ summary: `report ${k}`, text: filler }),
        error_code: null,
        error_message: null,
        usage: JSON.stringify({ input_tokens: 1200, output_tokens: 300, cost_usd: 0.01 }),
        retry_of: null,
        idempotency_key: keysEvery && k % keysEvery === 0 ? `idem-${id}` : null,
        changed_at: done,
        changed_by: 'worker:seed',
        change_reason: 'completed',
      };
      rows.push(row);
      if (chainsEvery && k % chainsEvery === 0) {
        const rid = newId();
        ids.push(rid);
        retries.push({
          ...row,
          id: rid,
          trigger_kind: 'retry',
          status: 'succeeded',
          retry_of: id,
          retry_root: id,
          retry_number: 1,
          idempotency_key: null,
          created_at: done,
          queued_at: done,
          started_at: done + 100,
          completed_at: done + 1000,
        });
      }
    }
    await store.transaction(async (tx) => {
      await store.insertMany(tx, 'executions', rows);
      if (retries.length) await store.insertMany(tx, 'executions', retries);
      // The insert trigger wrote each row's first event; add admission and completion.
      const all = [...rows, ...retries];
      const events = all.flatMap((r) => [
        {
          execution_id: r.id,
          agent,
          from_status: 'queued' as const,
          to_status: 'running' as const,
          at: r.started_at!,
          actor: 'worker:seed',
          reason: 'claimed',
          attempt: 1,
          seats_in_use: 1,
          seat_cap: 4,
        },
        {
          execution_id: r.id,
          agent,
          from_status: 'running' as const,
          to_status: r.status,
          at: r.completed_at!,
          actor: 'worker:seed',
          reason: 'completed',
          attempt: 1,
          seats_in_use: null,
          seat_cap: null,
        },
      ]);
      for (let i = 0; i < events.length; i += 500)
        await tx
          .insertInto('execution_events')
          .values(events.slice(i, i + 500))
          .execute();
      const logs = [];
      const heads = [];
      const keys = [];
      for (let i = 0; i < rows.length; i++) {
        const r = rows[i]!;
        const k = start + i;
        if (logsEvery && k % logsEvery === 0) {
          for (let s = 1; s <= 5; s++)
            logs.push({
              execution_id: r.id,
              seq: s,
              at: r.started_at! + s,
              stream: 'stdout' as const,
              line: `step ${s} of report ${k}: fetched 12 sections, 3 tables`,
            });
          heads.push({ execution_id: r.id, lines: 5, bytes: 250, truncated: 0 });
        }
        if (r.idempotency_key)
          keys.push({
            scope: `agent:${agent}`,
            idem_key: r.idempotency_key,
            request_hash: 'h',
            state: 'completed' as const,
            locked_until: 0,
            status_code: 201,
            response: '{}',
            execution_id: r.id,
            created_at: r.created_at,
            expires_at: r.created_at + 86_400_000,
          });
      }
      for (let i = 0; i < logs.length; i += 500)
        await tx
          .insertInto('execution_logs')
          .values(logs.slice(i, i + 500))
          .execute();
      for (let i = 0; i < heads.length; i += 500)
        await tx
          .insertInto('execution_log_heads')
          .values(heads.slice(i, i + 500))
          .execute();
      for (let i = 0; i < keys.length; i += 500)
        await tx
          .insertInto('idempotency_keys')
          .values(keys.slice(i, i + 500))
          .execute();
    });
  }
  return ids;
}

/** One execution row for hand-built cases (defaults: a succeeded run of agent `seeded`); insert it yourself. */
export function executionRow(id: string, o: Partial<NewExecution> & { completed_at: number | null }): NewExecution {
  const done = o.completed_at ?? o.created_at ?? 0;
  const status = o.status ?? 'succeeded';
  const running = status === 'running';
  return {
    id,
    agent: 'seeded',
    schedule_id: null,
    scheduled_for: null,
    trigger_kind: 'api',
    origin: '{}',
    message: 'hand-built',
    payload: '{}',
    priority: 0,
    run_after: null,
    status,
    attempt: 1,
    max_redeliveries: 3,
    timeout_seconds: 900,
    lease_ttl_seconds: 30,
    lease_owner: running ? 'worker:test' : null,
    lease_token: running ? 'tok' : null,
    lease_expires_at: running ? done + 30_000 : null,
    heartbeat_at: null,
    deadline_at: null,
    cancel_requested_at: null,
    created_at: done - 1000,
    queued_at: done - 1000,
    started_at: status === 'queued' ? null : done - 500,
    duration_ms: o.completed_at === null ? null : 500,
    result: null,
    error_code: null,
    error_message: null,
    usage: null,
    retry_of: null,
    idempotency_key: null,
    changed_at: done,
    changed_by: 'test',
    change_reason: null,
    // Every column, so multi-row inserts mixing overrides stay valid on SQLite (no DEFAULT in VALUES).
    retry_policy: null,
    retry_number: 0,
    retry_root: null,
    webhook_id: null,
    serial_key: null,
    ...o,
  };
}
