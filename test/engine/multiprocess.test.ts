/**
 * Real processes against one real store.
 *
 * - Contention (PostgreSQL only: several OS processes sharing one database). Six claimer
 *   processes, each with three claim loops, drain one agent's queue with max_parallel 1 and
 *   then 3. The proof is read back from the event log, not from what the claimers believed.
 * - Crash: a process that claimed a task is SIGKILLed; once its lease lapses the reaper queues
 *   the same execution again and another worker finishes it as attempt 2. Runs on both stores
 *   (SQLite in WAL mode takes a second process).
 */
import { describe, expect, it } from 'vitest';
import { isTerminal } from '../../src/domain/states.ts';
import type { Engine } from '../../src/engine/engine.ts';
import type { ExecutionEventRow } from '../../src/store/schema.ts';
import { type Child, spawnFixture, useStoreWithChildren } from '../helpers/processes.ts';
import { describeMultiProcess, STORE_KIND, type TestStore } from '../helpers/store.ts';

/** Claimer processes and claim loops in each: 18 loops competing for 1 or 3 seats. */
const PROCESSES = 6;
const LOOPS_PER_PROCESS = 3;
/**
 * Executions per phase (3,000 in all; BATON_MP_EXECUTIONS overrides). On an idle 2-core machine
 * both phases together take ~20-25 s: ~4-5 s to submit each batch, then ~170 admissions/s with one
 * seat and ~340/s with three.
 */
const EXECUTIONS = Number(process.env.BATON_MP_EXECUTIONS ?? 1500);

/**
 * How long one phase's claimers may run before they give up, and the test's own timeout (which
 * also covers submitting). Far above the ~10-15 s a phase needs on an idle machine: on a 2-core
 * box shared with other work a phase was measured at up to 75 s, and that must not fail.
 */
const PHASE_DEADLINE_MS = 120_000;
const PHASE_TIMEOUT_MS = 180_000;

let ts: TestStore;
let engine: Engine;

useStoreWithChildren((store, e) => {
  ts = store;
  engine = e;
});

async function submitMany(agent: string, count: number): Promise<string[]> {
  const ids: string[] = [];
  const next = { i: 0 };
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next.i < count) {
        const i = next.i++;
        ids.push((await engine.submit(agent, { message: `task ${i}`, payload: { i } }, 'test')).id);
      }
    }),
  );
  return ids;
}

const enters = (e: ExecutionEventRow) => e.to_status === 'running' && e.from_status !== 'running';
const leaves = (e: ExecutionEventRow) => e.from_status === 'running' && e.to_status !== 'running';
/** Owners are `<node id>/loop-<n>`: the process is the part before the slash. */
const processOf = (owner: string) => owner.split('/')[0]!;

/**
 * Replay the agent's event log in id order and report what it proves. On PostgreSQL ids come
 * from a sequence when the event is written, not when it commits, yet the replay is sound for
 * the cap: admissions hold the agent lock until they commit, so every earlier admission has a
 * smaller id, and a departure an admission relied on was written before it was counted.
 */
async function replay(agent: string) {
  const events = await ts.store.db.selectFrom('execution_events').selectAll().where('agent', '=', agent).orderBy('id').execute();
  let running = 0;
  let maxRunning = 0;
  const isRunning = new Map<string, boolean>();
  const doubleStarts: string[] = [];
  const strayLeaves: string[] = [];
  const seatViolations: ExecutionEventRow[] = [];
  const terminals = new Map<string, string[]>();
  const admittedBy = new Map<string, number>();
  const completedBy = new Map<string, number>();
  for (const e of events) {
    if (enters(e)) {
      running++;
      maxRunning = Math.max(maxRunning, running);
      if (isRunning.get(e.execution_id)) doubleStarts.push(e.execution_id);
      isRunning.set(e.execution_id, true);
      if (e.seats_in_use === null || e.seat_cap === null || e.seats_in_use > e.seat_cap || e.seats_in_use < 1) seatViolations.push(e);
      admittedBy.set(processOf(e.actor), (admittedBy.get(processOf(e.actor)) ?? 0) + 1);
    }
    if (leaves(e)) {
      running--;
      if (!isRunning.get(e.execution_id)) strayLeaves.push(e.execution_id);
      isRunning.set(e.execution_id, false);
    }
    if (isTerminal(e.to_status)) {
      terminals.set(e.execution_id, [...(terminals.get(e.execution_id) ?? []), e.to_status]);
      completedBy.set(processOf(e.actor), (completedBy.get(processOf(e.actor)) ?? 0) + 1);
    }
  }
  return { events, running, maxRunning, doubleStarts, strayLeaves, seatViolations, terminals, admittedBy, completedBy };
}

describeMultiProcess(`several processes, one agent (${STORE_KIND})`, () => {
  async function contend(agent: string, cap: number) {
    await engine.agents.create(
      { name: agent, max_parallel: cap, max_backlog: EXECUTIONS, lease_ttl_seconds: 30, timeout_seconds: 600 },
      'test',
    );
    const t0 = Date.now();
    const children: Child[] = Array.from({ length: PROCESSES }, (_, k) =>
      spawnFixture(
        'claimer',
        [
          '--agent',
          agent,
          '--node-id',
          `claimer-${k + 1}`,
          '--loops',
          String(LOOPS_PER_PROCESS),
          '--max-claim',
          '3',
          '--hold-ms',
          '3',
          '--wait-ms',
          '50',
          '--total',
          String(EXECUTIONS),
          '--deadline-ms',
          String(PHASE_DEADLINE_MS),
          '--wait-for-go',
        ],
        ts.env,
      ),
    );
    // The queue fills while the processes start; they claim only once all are ready.
    const ids = await submitMany(agent, EXECUTIONS);
    const submitMs = Date.now() - t0;
    await Promise.all(children.map((c) => c.line((l) => l === 'ready', 60_000)));
    const setupMs = Date.now() - t0;
    const started = Date.now();
    for (const c of children) c.proc.stdin!.end('go\n');
    const exits = await Promise.all(children.map((c) => c.exit(PHASE_DEADLINE_MS + 5_000)));
    const elapsed = Date.now() - started;

    for (const [k, x] of exits.entries())
      expect(x, `claimer-${k + 1} stderr:\n${children[k]!.stderr()}`).toEqual({ code: 0, signal: null });
    const summaries = children.map((c) => JSON.parse(c.lines.at(-1)!));
    for (const s of summaries) expect(s.errors).toEqual([]);
    expect(summaries.reduce((n, s) => n + s.completed, 0)).toBe(EXECUTIONS);

    const log = await replay(agent);
    // The cap held at every point of the history, and was actually reached.
    expect(log.maxRunning).toBe(cap);
    expect(log.running).toBe(0);
    expect(log.seatViolations).toEqual([]);
    expect(new Set(log.events.filter(enters).map((e) => e.seat_cap))).toEqual(new Set([cap]));
    // No execution ran twice at once; each ran once, on its first delivery.
    expect(log.doubleStarts).toEqual([]);
    expect(log.strayLeaves).toEqual([]);
    expect(log.events.filter(enters)).toHaveLength(EXECUTIONS);
    expect(log.events.filter(enters).every((e) => e.attempt === 1)).toBe(true);
    // Each execution ended exactly once, succeeded.
    expect(log.terminals.size).toBe(EXECUTIONS);
    for (const id of ids) expect(log.terminals.get(id), id).toEqual(['succeeded']);
    const rows = await ts.store.db.selectFrom('executions').select(['status']).where('agent', '=', agent).execute();
    expect(rows.filter((r) => r.status === 'succeeded')).toHaveLength(EXECUTIONS);
    // The work was really shared between processes, and each process's own count of what it
    // claimed and completed matches what the log says it did.
    expect(log.admittedBy.size).toBeGreaterThan(1);
    for (const s of summaries) {
      expect(log.admittedBy.get(s.node_id) ?? 0, s.node_id).toBe(s.claimed);
      expect(log.completedBy.get(s.node_id) ?? 0, s.node_id).toBe(s.completed);
    }

    const claims = summaries.reduce((n, s) => n + s.claims, 0);
    const empty = summaries.reduce((n, s) => n + s.empty_claims, 0);
    const perProcess = Object.fromEntries([...log.admittedBy].sort());
    console.log(
      `max_parallel ${cap}: ${EXECUTIONS} executions drained in ${elapsed} ms by ${log.admittedBy.size} processes` +
        ` (set-up ${setupMs} ms, of which submitting ${submitMs} ms; ${claims} claims, ${empty} empty); admissions per process:`,
      perProcess,
    );
    return { elapsed, perProcess };
  }

  it(
    `max_parallel 1: ${PROCESSES} processes × ${LOOPS_PER_PROCESS} loops never run two at once`,
    async () => {
      await contend('mp-cap-1', 1);
    },
    PHASE_TIMEOUT_MS,
  );

  it(
    `max_parallel 3: ${PROCESSES} processes × ${LOOPS_PER_PROCESS} loops never run four at once`,
    async () => {
      await contend('mp-cap-3', 3);
    },
    PHASE_TIMEOUT_MS,
  );
});

describe(`a worker process killed with SIGKILL (${STORE_KIND})`, () => {
  it('its lapsed lease re-queues the same execution, which another worker finishes as attempt 2', async () => {
    const agent = 'mp-sigkill';
    await engine.agents.create({ name: agent, max_parallel: 1, lease_ttl_seconds: 1, timeout_seconds: 600, max_redeliveries: 3 }, 'test');
    const submitted = await engine.submit(agent, { message: 'survive a crash' }, 'test');

    const holder = spawnFixture('hold', ['--agent', agent, '--owner', 'holder-1'], ts.env);
    const held = JSON.parse(await holder.line((l) => l.startsWith('{'), 30_000));
    expect(held).toMatchObject({ id: submitted.id, attempt: 1, owner: 'holder-1', pid: holder.pid });
    const running = (await engine.getExecution(submitted.id)).execution;
    expect(running).toMatchObject({ status: 'running', lease_owner: 'holder-1', attempt: 1 });
    // The seat is taken: nobody else gets work while the holder's lease is live.
    expect(await engine.claim(agent, { owner: 'rescuer' })).toEqual([]);

    expect(holder.proc.kill('SIGKILL')).toBe(true);
    expect(await holder.exit(5_000)).toEqual({ code: null, signal: 'SIGKILL' });

    // A little over the TTL after the lease was granted.
    const lapse = running.lease_expires_at! + 200 - Date.now();
    if (lapse > 0) await new Promise((r) => setTimeout(r, lapse));
    const reaped = (await engine.reapOnce()).filter((r) => r.agent === agent);
    expect(reaped).toEqual([{ id: submitted.id, agent, kind: 'requeued', to: 'queued' }]);
    expect((await engine.getExecution(submitted.id)).execution).toMatchObject({ status: 'queued', attempt: 1 });

    const [again] = await engine.claim(agent, { owner: 'rescuer', waitMs: 2_000 });
    expect(again).toMatchObject({ id: submitted.id, attempt: 2, lease_owner: 'rescuer' });
    expect(again!.lease_token).not.toBe(running.lease_token);
    await engine.complete(again!.id, again!.lease_token!, { status: 'succeeded' }, 'rescuer');

    const { execution, events } = await engine.getExecution(submitted.id);
    expect(execution).toMatchObject({ status: 'succeeded', attempt: 2 });
    expect(events.map((e) => [e.from_status, e.to_status, e.actor, e.attempt])).toEqual([
      [null, 'queued', 'test', 0],
      ['queued', 'running', 'holder-1', 1],
      ['running', 'queued', 'reaper:test-node', 1],
      ['queued', 'running', 'rescuer', 2],
      ['running', 'succeeded', 'rescuer', 2],
    ]);
    expect(events[2]!.reason).toBe('requeued');
  });
});
