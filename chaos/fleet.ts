/**
 * The chaos run's fleet-kill phase (shared-cause lapses): every worker of one agent is
 * SIGKILLed at once while each holds tasks. Their leases lapse together, so the reaper must
 * re-queue them without charging an attempt (`requeued_shared`) and hold the agent until a worker
 * is seen again; a fresh fleet then finishes them on the attempt they were first charged.
 */
import type { StoreAdapter } from '../src/store/adapter.ts';
import { sigkill, workerProc, type Proc } from './cluster.ts';

export interface FleetKillResult {
  /** Workers killed at once, and the executions they held when killed. */
  workers: number;
  held: number;
  /** Of those, re-queued by the reaper as a shared-cause lapse (attempt given back). */
  requeued_shared: number;
  /** Of those, whose lapse was charged an attempt: must be 0. */
  charged: number;
  /** Of those, finished (succeeded) by the fresh workers on their first charged attempt. */
  finished: number;
}

export interface FleetKillOptions {
  store: StoreAdapter;
  admin: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>;
  server: () => string;
  key: string;
  leaseTtl: number;
  /** The normal quick command, for the fleet that finishes the work. */
  command: string[];
  /** Every process started here is added, so the run's own cleanup stops it. */
  procs: Proc[];
  log: (line: string) => void;
}

const AGENT = 'chaos-fleet';
const WORKERS = 2;
const PER_WORKER = 2;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The harness's reads ride out a PostgreSQL restart: retried for up to 30 s, not fatal. */
async function patiently<T>(read: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await read();
    } catch (err) {
      if (i >= 120) throw err;
      await sleep(250);
    }
  }
}

export async function fleetKillPhase(o: FleetKillOptions): Promise<FleetKillResult> {
  const created = await o.admin('POST', '/v1/agents', {
    name: AGENT,
    max_parallel: WORKERS * PER_WORKER,
    max_backlog: 100,
    lease_ttl_seconds: o.leaseTtl,
    timeout_seconds: 300,
    max_redeliveries: 3,
  });
  if (created.status !== 201) throw new Error(`create agent ${AGENT}: ${created.status} ${JSON.stringify(created.body)}`);
  for (let i = 0; i < WORKERS * PER_WORKER; i++) {
    const r = await o.admin('POST', `/v1/agents/${AGENT}/executions`, { message: `fleet task ${i}` });
    if (r.status !== 201 && r.status !== 202) throw new Error(`submit to ${AGENT}: ${r.status} ${JSON.stringify(r.body)}`);
  }
  // Tasks that outlive the kill: the leases must lapse, not complete. `exec` so the sleep dies
  // with nobody to report to; it ends by itself well after the phase.
  const slow = ['/bin/sh', '-c', 'cat >/dev/null; exec sleep 60'];
  const doomed = Array.from({ length: WORKERS }, (_, k) => workerProc(`fleet${k + 1}`, AGENT, o.server, o.key, PER_WORKER, slow));
  o.procs.push(...doomed);
  for (const w of doomed) await w.start();

  const owners = doomed.map((w) => w.workerId());
  const running = () =>
    patiently(() =>
      o.store.db
        .selectFrom('executions')
        .select(['id', 'attempt'])
        .where('agent', '=', AGENT)
        .where('status', '=', 'running')
        .where('lease_owner', 'in', owners)
        .execute(),
    );
  let held = await running();
  for (let i = 0; i < 120 && held.length < WORKERS * PER_WORKER; i++) {
    await sleep(250);
    held = await running();
  }
  const killedAt = Date.now();
  for (const w of doomed) sigkill(w);
  await sleep(300);
  held = await running(); // what they held when they died (a completion cannot land any more)
  o.log(`fleet kill: SIGKILL ${WORKERS} workers of ${AGENT} at once, holding ${held.length}`);
  const ids = held.map((h) => h.id);
  const attempts = new Map(held.map((h) => [h.id, Number(h.attempt)]));
  if (ids.length === 0) return { workers: WORKERS, held: 0, requeued_shared: 0, charged: 0, finished: 0 };

  // Wait for the reapers: a lease TTL and a few passes.
  const requeues = () =>
    patiently(() =>
      o.store.db
        .selectFrom('execution_events')
        .select(['execution_id', 'reason', 'attempt'])
        .where('execution_id', 'in', ids)
        .where('from_status', '=', 'running')
        .where('at', '>=', killedAt - 1_000)
        .execute(),
    );
  let events = await requeues();
  const limit = Date.now() + o.leaseTtl * 1000 + 30_000;
  while (new Set(events.map((e) => e.execution_id)).size < ids.length && Date.now() < limit) {
    await sleep(250);
    events = await requeues();
  }
  const shared = events.filter((e) => e.reason === 'requeued_shared' && Number(e.attempt) === attempts.get(e.execution_id)! - 1);
  const charged = ids.length - new Set(shared.map((e) => e.execution_id)).size;

  // A fresh fleet claims (ending the hold) and finishes the work.
  const fresh = Array.from({ length: WORKERS }, (_, k) => workerProc(`fleet${k + 1}-fresh`, AGENT, o.server, o.key, PER_WORKER, o.command));
  o.procs.push(...fresh);
  for (const w of fresh) await w.start();
  const done = () =>
    patiently(() =>
      o.store.db
        .selectFrom('executions')
        .select(['id', 'status', 'attempt'])
        .where('id', 'in', ids)
        .where('status', '=', 'succeeded')
        .execute(),
    );
  let finished = await done();
  for (let i = 0; i < 240 && finished.length < ids.length; i++) {
    await sleep(250);
    finished = await done();
  }
  const onFirstCharge = finished.filter((f) => Number(f.attempt) === attempts.get(f.id));
  o.log(`fleet kill: ${shared.length}/${ids.length} re-queued uncharged; ${onFirstCharge.length} finished on their first charged attempt`);
  return { workers: WORKERS, held: ids.length, requeued_shared: shared.length, charged, finished: onFirstCharge.length };
}
