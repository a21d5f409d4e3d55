/**
 * `--pg-failover`: the run's database is a cluster of its own — a primary and a streaming standby
 * started from the machine's PostgreSQL binaries in a temporary directory — and Baton (servers and
 * the harness alike) is given both hosts with target_session_attrs=read-write. Halfway through the
 * load the primary is killed (`pg_ctl stop -m immediate`: no shutdown checkpoint, every client
 * cut) and the standby promoted by hand exactly as Patroni would (`pg_ctl promote`, then wait for
 * the end of recovery); Patroni itself is not installed. The run's usual checks then read the
 * promoted primary, through the same URL.
 *
 * Measured: the standby's replication state at the kill, the time from the primary's death to the
 * first successful submit and claim (a probe through the API, and the traffic's own in the event
 * log), and acknowledged writes missing on the new primary — 0 with synchronous replication, or
 * the run fails; with `--pg-failover-async` (the standby asynchronous) the count is reported.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import type { StoreAdapter } from '../src/store/adapter.ts';
import type { TrafficStats } from './traffic.ts';
import { replicateTo, standbyState, startPgCluster, startPgStandby, type PgCluster } from '../test/helpers/pg-cluster.ts';
import { waitReady, type Proc } from './cluster.ts';
import { freePort, sleep } from './options.ts';

/**
 * From the primary's death to the promotion. Patroni promotes once the leader key has expired
 * (its `ttl`, 30 s by default) when the primary's machine is gone; a short fixed delay keeps the
 * quick run short and still leaves Baton a while with no host that takes writes.
 */
export const PROMOTE_AFTER_MS = 2_000;

/** The agent the probe submits to and claims from (no worker serves it). */
export const PROBE_AGENT = 'chaos-probe';

export interface FailoverCluster {
  /** Both hosts, primary first, as an operator would write BATON_DATABASE_URL. */
  url: string;
  primary: PgCluster;
  standby: PgCluster;
  replication: 'synchronous' | 'asynchronous';
  dir: string;
  close(removeFiles: boolean): void;
}

export async function startFailoverCluster(synchronous: boolean): Promise<FailoverCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'baton-chaos-failover-'));
  // The clusters run as the postgres user: it must be able to enter the directory.
  chmodSync(dir, 0o755);
  // Two servers' pools, their LISTEN connections, the harness, and the connections of killed servers until they are noticed.
  const settings = { max_connections: 150 };
  const primary = startPgCluster({ dataDir: join(dir, 'primary'), workDir: join(dir, 'primary-work'), port: await freePort(), settings });
  let standby: PgCluster | undefined;
  try {
    standby = startPgStandby({
      primaryPort: primary.port,
      dataDir: join(dir, 'standby'),
      workDir: join(dir, 'standby-work'),
      port: await freePort(),
      settings,
    });
    await replicateTo(primary.url, synchronous ? 'sync' : 'async');
  } catch (err) {
    standby?.stop();
    primary.stop();
    throw err;
  }
  const both = standby;
  return {
    url: `postgres://postgres@127.0.0.1:${primary.port},127.0.0.1:${standby.port}/test?target_session_attrs=read-write`,
    primary,
    standby,
    replication: synchronous ? 'synchronous' : 'asynchronous',
    dir,
    close(removeFiles) {
      primary.stop();
      both.stop();
      if (removeFiles) rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface FailoverResult {
  replication: 'synchronous' | 'asynchronous';
  primary_port: number;
  standby_port: number;
  /** pg_stat_replication on the primary just before the kill: `sync` (or `async`) and WAL not yet flushed there. */
  standby_at_kill: { sync_state: string; lag_bytes: number } | null;
  /** When the primary died, from the start of the traffic. */
  died_at_ms: number;
  /** Every duration below counts from the primary's death. */
  promoted_ms: number;
  /** The probe (one client, through the API, every 100 ms): its first submit answered 201, its first claim that got the task. */
  first_submit_ms: number | null;
  first_claim_ms: number | null;
  /** Probe requests refused (503 or no answer) meanwhile. */
  probe_refused: number;
  /**
   * The traffic's own: its first creation acknowledged of a request sent after the death, and its
   * workers' first claim, as the harness sees it polling the event log every 100 ms (an upper
   * bound: an event's time is stamped when its transition starts, before it could commit).
   */
  traffic_first_submit_ms: number | null;
  worker_first_claim_ms: number | null;
  /** Every server answering /readyz again. */
  servers_ready_ms: number | null;
  /** Acknowledged creations (API, trigger, webhook, keyed, probe) missing on the promoted primary. */
  acknowledged_lost: number;
  /** The port of the server the checks read after settle: must be the promoted standby's. */
  checked_on_port: number | null;
  probe_execution: string | null;
}

type Call = (method: string, path: string, body?: unknown, idem?: string) => Promise<{ status: number; body: any } | undefined>;

function caller(servers: ReadonlyArray<Proc & { url: string }>, key: string): Call {
  let turn = 0;
  return async (method, path, body, idem) => {
    const live = servers.filter((s) => s.alive());
    const s = (live.length ? live : servers)[turn++ % (live.length || servers.length)]!;
    const headers: Record<string, string> = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    if (idem) headers['idempotency-key'] = idem;
    try {
      const r = await fetch(s.url + path, { method, headers, body: JSON.stringify(body ?? {}), signal: AbortSignal.timeout(5_000) });
      const text = await r.text();
      return { status: r.status, body: text ? JSON.parse(text) : null };
    } catch {
      return undefined;
    }
  };
}

/** One submit, its claim and its completion, each retried every 100 ms until it succeeds. */
async function probe(call: Call, diedAt: number, deadline: number) {
  const out = { submit: null as number | null, claim: null as number | null, refused: 0, id: null as string | null };
  const until = async (what: () => Promise<boolean>) => {
    while (Date.now() < deadline) {
      if (await what()) return true;
      out.refused++;
      await sleep(100);
    }
    return false;
  };
  const submitted = await until(async () => {
    const r = await call('POST', `/v1/agents/${PROBE_AGENT}/executions`, { message: 'failover probe' }, 'chaos-failover-probe');
    if (!r || (r.status !== 201 && r.status !== 200)) return false;
    out.id = r.body.execution_id;
    return true;
  });
  if (!submitted) return out;
  out.submit = Date.now() - diedAt;
  let task: { execution_id: string; lease_token: string } | undefined;
  const claimed = await until(async () => {
    const r = await call('POST', `/v1/agents/${PROBE_AGENT}/claim`, { wait_seconds: 0 });
    task = r?.status === 200 ? r.body?.tasks?.[0] : undefined;
    return !!task;
  });
  if (!claimed) return out;
  out.claim = Date.now() - diedAt;
  await until(async () => {
    const r = await call('POST', `/v1/executions/${task!.execution_id}/complete`, { lease_token: task!.lease_token, status: 'succeeded' });
    return r?.status === 200;
  });
  return out;
}

/** When the harness first sees an admission of chaos-a or chaos-b stamped after `diedAt`, in ms after it. */
async function firstWorkerClaim(store: StoreAdapter, diedAt: number, deadline: number): Promise<number | null> {
  while (Date.now() < deadline) {
    try {
      const row = await store.db
        .selectFrom('execution_events')
        .select('id')
        .where('agent', 'in', ['chaos-a', 'chaos-b'])
        .where('from_status', '=', 'queued')
        .where('to_status', '=', 'running')
        .where('at', '>=', diedAt)
        .limit(1)
        .executeTakeFirst();
      if (row) return Date.now() - diedAt;
    } catch {
      /* no primary yet */
    }
    await sleep(100);
  }
  return null;
}

export async function createProbeAgent(admin: Call): Promise<void> {
  const r = await admin('POST', '/v1/agents', { name: PROBE_AGENT, max_parallel: 1, lease_ttl_seconds: 120, max_backlog: 10 });
  if (r?.status !== 201) throw new Error(`create agent ${PROBE_AGENT}: ${r?.status} ${JSON.stringify(r?.body)}`);
}

/**
 * Kill the primary, promote the standby PROMOTE_AFTER_MS later, and time the way back: the probe's
 * submit and claim, every server ready. The traffic and the workers go on throughout.
 */
export async function failOver(o: {
  cluster: FailoverCluster;
  store: StoreAdapter;
  servers: ReadonlyArray<Proc & { url: string }>;
  key: string;
  t0: number;
  log: (line: string) => void;
}): Promise<FailoverResult> {
  const { primary, standby } = o.cluster;
  const atKill = await standbyState(primary.url).catch(() => null);
  const diedAt = Date.now();
  primary.kill();
  o.log(
    `killed the primary (pg_ctl stop -m immediate; standby was ${atKill?.sync_state ?? 'not streaming'}, ${atKill?.lag_bytes ?? '?'} bytes behind)`,
  );
  const probing = probe(caller(o.servers, o.key), diedAt, diedAt + 120_000);
  const claimSeen = firstWorkerClaim(o.store, diedAt, diedAt + 120_000);
  await sleep(PROMOTE_AFTER_MS - (Date.now() - diedAt));
  await standby.promote();
  const promoted = Date.now() - diedAt;
  o.log(`promoted the standby (pg_ctl promote) ${promoted} ms after the primary died`);
  const p = await probing;
  const workerClaim = await claimSeen;
  let ready: number | null = null;
  try {
    for (const s of o.servers) if (s.alive()) await waitReady(s.url, s, 60_000);
    ready = Date.now() - diedAt;
  } catch {
    /* reported as null: the run fails on what follows */
  }
  o.log(
    `after the primary's death: first submit ${p.submit ?? 'never'} ms, first claim ${p.claim ?? 'never'} ms, servers ready ${ready ?? 'never'} ms`,
  );
  return {
    replication: o.cluster.replication,
    primary_port: primary.port,
    standby_port: standby.port,
    standby_at_kill: atKill,
    died_at_ms: diedAt - o.t0,
    promoted_ms: promoted,
    first_submit_ms: p.submit,
    first_claim_ms: p.claim,
    probe_refused: p.refused,
    traffic_first_submit_ms: null,
    worker_first_claim_ms: workerClaim,
    servers_ready_ms: ready,
    acknowledged_lost: 0,
    checked_on_port: null,
    probe_execution: p.id,
  };
}

/**
 * After settle, on the promoted primary: the port the checks read, how many acknowledged
 * creations are missing, and the traffic's first acknowledged creation sent after the death.
 */
export async function afterFailover(
  store: StoreAdapter,
  f: FailoverResult,
  t0: number,
  traffic: TrafficStats,
  acknowledgedMissing: number,
): Promise<void> {
  const diedAt = t0 + f.died_at_ms;
  const after = traffic.answered.filter((a) => a.sent >= diedAt).map((a) => a.at - diedAt);
  f.traffic_first_submit_ms = after.length ? Math.min(...after) : null;
  const port = await sql<{ port: number }>`SELECT inet_server_port() AS port`.execute(store.db);
  f.checked_on_port = Number(port.rows[0]?.port ?? 0) || null;
  f.acknowledged_lost = acknowledgedMissing;
}

/**
 * The failover's own conditions: the standby streamed in the mode asked for when the primary died,
 * Baton served submits and claims again, the checks read the promoted standby, and — with
 * synchronous replication — no acknowledged write is missing.
 */
export function failoverPassed(f: FailoverResult): boolean {
  const mode = f.replication === 'synchronous' ? 'sync' : 'async';
  return (
    f.standby_at_kill?.sync_state === mode &&
    f.first_submit_ms !== null &&
    f.first_claim_ms !== null &&
    f.servers_ready_ms !== null &&
    f.checked_on_port === f.standby_port &&
    (f.replication === 'asynchronous' || f.acknowledged_lost === 0)
  );
}
