import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MAX_FORGIVEN_LAPSES } from '../../src/domain/admission.ts';
import { BatonError } from '../../src/domain/errors.ts';
import { isTerminal } from '../../src/domain/states.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { agentMaker } from '../helpers/agents.ts';
import { refusal } from '../helpers/expect.ts';

// Crash logic tested by writing time: leases lapse because the clock moves (or because the
// test writes a lapsed lease into the row), and the reaper runs when the test calls it.

const LEASE_MS = 30_000;
const TIMEOUT_MS = 600_000;
const GRACE_MS = 30_000;
const BACKLOG_MS = 3_600_000;

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let agent: string;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'test-node', cancelGraceMs: GRACE_MS, backlogExpiryMs: BACKLOG_MS });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});
beforeEach(async () => {
  agent = await newAgent();
});

/** Defaults to one seat and the default max_redeliveries (3). */
// breaker: null — these races fail many runs of one agent on purpose; a breaker (on by default
// for new agents) would open and stop the next claim (test/engine/breaker.test.ts covers it).
const newAgent = agentMaker(() => engine, 'agent', {
  max_parallel: 1,
  max_backlog: 10,
  lease_ttl_seconds: LEASE_MS / 1000,
  timeout_seconds: TIMEOUT_MS / 1000,
  breaker: null,
});

const claimOne = async (owner: string, on = agent): Promise<ExecutionRow> => {
  const [row] = await engine.claim(on, { owner });
  if (!row) throw new Error(`nothing to claim on ${on}`);
  return row;
};

/** Reap, keeping only what happened to this test's agents (earlier tests leave rows behind). */
const reap = async (...agents: string[]) => {
  const mine = agents.length > 0 ? agents : [agent];
  return (await engine.reapOnce()).filter((r) => mine.includes(r.agent)).map((r) => [r.id, r.kind, r.to]);
};

/** [from, to] per event, and the reason on the reaper's own events (other writers name theirs). */
const transitions = async (id: string) =>
  (await engine.getExecution(id)).events.map((e) =>
    e.actor.startsWith('reaper:') ? [e.from_status, e.to_status, e.reason] : [e.from_status, e.to_status],
  );

/**
 * The row and its event log agree: the events form one unbroken chain from creation to the
 * row's status, nothing ever leaves a terminal state, and a running row holds a live lease.
 */
async function expectConsistent(id: string): Promise<ExecutionRow> {
  const { execution: row, events } = await engine.getExecution(id);
  let prev: string | null = null;
  for (const e of events) {
    expect(e.from_status, `event ${e.id} continues the chain`).toBe(prev);
    expect(prev !== null && isTerminal(prev), `event ${e.id} leaves terminal ${prev}`).toBe(false);
    prev = e.to_status;
  }
  expect(prev).toBe(row.status);
  if (row.status === 'running') {
    expect(row.lease_owner).toBeTruthy();
    expect(row.lease_token).toBeTruthy();
    expect(row.lease_expires_at).toBeGreaterThan(clock());
  }
  if (isTerminal(row.status)) expect(row.completed_at).not.toBeNull();
  return row;
}

describe(`reaper (${STORE_KIND})`, () => {
  it('a lapsed lease with deliveries left goes back to the queue: same id, attempt 2, new token', async () => {
    const ex = await engine.submit(agent, { message: 'x' }, 't');
    const first = await claimOne('w1');
    expect(first.attempt).toBe(1);

    clock.advance(LEASE_MS); // expiry reached, not passed
    expect(await reap()).toEqual([]);
    clock.advance(1);
    expect(await reap()).toEqual([[ex.id, 'requeued', 'queued']]);

    const queued = await expectConsistent(ex.id);
    expect(queued.status).toBe('queued');
    expect(queued.attempt).toBe(1);
    expect(queued.lease_expires_at).toBeNull();
    expect(queued.deadline_at).toBeNull();

    const second = await claimOne('w2');
    expect(second.id).toBe(ex.id);
    expect(second.attempt).toBe(2);
    expect(second.lease_token).not.toBe(first.lease_token);
    expect(second.lease_owner).toBe('w2');
    expect(await transitions(ex.id)).toEqual([
      [null, 'queued'],
      ['queued', 'running'],
      ['running', 'queued', 'requeued'],
      ['queued', 'running'],
    ]);
    const { events } = await engine.getExecution(ex.id);
    expect(events[2]!.actor).toBe('reaper:test-node');
    expect(events.map((e) => e.attempt)).toEqual([0, 1, 1, 2]);
    await expectConsistent(ex.id);
  });

  it('the 4th lapse with the default max_redeliveries (3) parks the task as failed (poisoned), keeping the evidence', async () => {
    const ex = await engine.submit(agent, { message: 'poison' }, 't');
    for (let attempt = 1; attempt <= 3; attempt++) {
      const row = await claimOne(`w${attempt}`);
      expect(row.attempt).toBe(attempt);
      clock.advance(LEASE_MS + 1);
      expect(await reap()).toEqual([[ex.id, 'requeued', 'queued']]);
    }
    const last = await claimOne('w4');
    expect(last.attempt).toBe(4);
    clock.advance(10_000);
    await engine.heartbeat(ex.id, last.lease_token!);
    const lastBeat = clock();
    clock.advance(LEASE_MS + 1);
    expect(await reap()).toEqual([[ex.id, 'poisoned', 'failed']]);

    const row = await expectConsistent(ex.id);
    expect(row.status).toBe('failed');
    expect(row.error_code).toBe('poisoned');
    expect(row.attempt).toBe(4);
    expect(row.error_message).toContain('4 deliveries');
    expect(row.error_message).toContain('w4');
    expect(row.error_message).toContain(new Date(lastBeat).toISOString());
    expect(row.lease_expires_at).toBeNull();
    expect((await transitions(ex.id)).filter((t) => t[0] === 'running' && t[1] !== 'running').map((t) => t[2])).toEqual([
      'requeued',
      'requeued',
      'requeued',
      'poisoned',
    ]);
    expect(await engine.claim(agent, { owner: 'w5' })).toEqual([]);
    expect((await refusal(engine.complete(ex.id, last.lease_token!, { status: 'succeeded' }, 'w4'))).code).toBe('lease_lost');
  });

  it('a graceful release does not count towards poisoning', async () => {
    const a = await newAgent({ max_redeliveries: 0 });
    const ex = await engine.submit(a, { message: 'x' }, 't');
    for (let i = 0; i < 3; i++) {
      const row = await claimOne('w', a);
      await engine.release(row.id, row.lease_token!, 'w');
    }
    const row = await claimOne('w', a);
    expect(row.attempt).toBe(1);
    clock.advance(LEASE_MS + 1);
    // max_redeliveries 0: the first lapse is already the last delivery.
    expect(await reap(a)).toEqual([[ex.id, 'poisoned', 'failed']]);
  });

  it('a task running past its timeout fails as timeout though it heartbeats; the next heartbeat says why', async () => {
    const ex = await engine.submit(agent, { message: 'hang' }, 't');
    const row = await claimOne('w1');
    expect(row.deadline_at).toBe(row.started_at! + TIMEOUT_MS);
    while (clock() + 20_000 <= row.deadline_at!) {
      clock.advance(20_000);
      await engine.heartbeat(ex.id, row.lease_token!);
      expect(await reap()).toEqual([]);
    }
    clock.set(row.deadline_at! + 1);
    await engine.heartbeat(ex.id, row.lease_token!); // the lease is live: only the deadline ends it
    expect(await reap()).toEqual([[ex.id, 'timed_out', 'failed']]);

    const after = await expectConsistent(ex.id);
    expect(after.status).toBe('failed');
    expect(after.error_code).toBe('timeout');
    expect(after.duration_ms).toBe(TIMEOUT_MS + 1);

    const hb = await refusal(engine.heartbeat(ex.id, row.lease_token!));
    expect(hb.code).toBe('lease_lost');
    expect(hb.details).toMatchObject({ execution_id: ex.id, status: 'failed', error_code: 'timeout' });
    expect((await refusal(engine.complete(ex.id, row.lease_token!, { status: 'succeeded' }, 'w1'))).code).toBe('lease_lost');
    expect((await engine.getExecution(ex.id)).execution.error_code).toBe('timeout');
  });

  it('a row queued longer than the backlog expiry fails as backlog_expired', async () => {
    const ex = await engine.submit(agent, { message: 'nobody serves me' }, 't');
    clock.advance(BACKLOG_MS);
    expect(await reap()).toEqual([]);
    clock.advance(1);
    expect(await reap()).toEqual([[ex.id, 'backlog_expired', 'failed']]);
    const row = await expectConsistent(ex.id);
    expect(row.error_code).toBe('backlog_expired');
    expect(await transitions(ex.id)).toEqual([
      [null, 'queued'],
      ['queued', 'failed', 'backlog_expired'],
    ]);
    expect(await engine.claim(agent, { owner: 'w' })).toEqual([]);
  });

  it('a re-queued row waits from its last start, and its expiry records how long it ran', async () => {
    const ex = await engine.submit(agent, { message: 'x' }, 't');
    clock.advance(BACKLOG_MS / 2); // waiting before the first start does not count twice
    const row = await claimOne('w1');
    clock.advance(LEASE_MS + 1);
    expect(await reap()).toEqual([[ex.id, 'requeued', 'queued']]);
    clock.set(row.started_at! + BACKLOG_MS);
    expect(await reap()).toEqual([]);
    clock.advance(1);
    expect(await reap()).toEqual([[ex.id, 'backlog_expired', 'failed']]);
    const after = await expectConsistent(ex.id);
    expect(after.duration_ms).toBe(BACKLOG_MS + 1);
  });

  it('a requeue and a backlog expiry of the same row in one pass keep the event log in order', async () => {
    // Backlog expiry shorter than the lapse: the row is re-queued and expired in one transaction.
    const short = new Engine({ store: ts.store, clock, nodeId: 'short', cancelGraceMs: GRACE_MS, backlogExpiryMs: LEASE_MS / 2 });
    try {
      const ex = await engine.submit(agent, { message: 'x' }, 't');
      await claimOne('w1');
      clock.advance(LEASE_MS + 1);
      const reaped = (await short.reapOnce()).filter((r) => r.agent === agent).map((r) => [r.id, r.kind, r.to]);
      expect(reaped).toEqual([
        [ex.id, 'requeued', 'queued'],
        [ex.id, 'backlog_expired', 'failed'],
      ]);
      expect(await transitions(ex.id)).toEqual([
        [null, 'queued'],
        ['queued', 'running'],
        ['running', 'queued', 'requeued'],
        ['queued', 'failed', 'backlog_expired'],
      ]);
      expect((await engine.getExecution(ex.id)).events.map((e) => e.attempt)).toEqual([0, 1, 1, 1]);
      await expectConsistent(ex.id);
    } finally {
      short.close();
    }
  });

  it('fencing: a slow worker lands its result after a requeue, but not after someone else claimed the row', async () => {
    // Re-queued, not yet re-claimed: the old token is still the latest one granted.
    const slow = await engine.submit(agent, { message: 'slow' }, 't');
    const t1 = (await claimOne('w1')).lease_token!;
    clock.advance(LEASE_MS + 1);
    expect(await reap()).toEqual([[slow.id, 'requeued', 'queued']]);
    // A heartbeat cannot revive the lease; it tells the worker the row went back to the queue.
    const hb = await refusal(engine.heartbeat(slow.id, t1));
    expect(hb.code).toBe('lease_lost');
    expect(hb.details).toMatchObject({ status: 'queued' });
    const done = await engine.complete(slow.id, t1, { status: 'succeeded', result: { ok: true } }, 'w1');
    expect(done.status).toBe('succeeded');
    expect(done.result).toBe(JSON.stringify({ ok: true }));
    expect((await transitions(slow.id)).slice(-2)).toEqual([
      ['running', 'queued', 'requeued'],
      ['queued', 'succeeded'],
    ]);
    await expectConsistent(slow.id);
    expect(await engine.claim(agent, { owner: 'w2' })).toEqual([]);

    // Re-claimed by w2: w1's token is dead for every write, and nothing changes.
    const taken = await engine.submit(agent, { message: 'taken' }, 't');
    const old = await claimOne('w1');
    clock.advance(LEASE_MS + 1);
    expect(await reap()).toEqual([[taken.id, 'requeued', 'queued']]);
    const fresh = await claimOne('w2');
    const before = await engine.getExecution(taken.id);
    expect((await refusal(engine.complete(taken.id, old.lease_token!, { status: 'succeeded' }, 'w1'))).code).toBe('lease_lost');
    expect(
      (await refusal(engine.complete(taken.id, old.lease_token!, { status: 'failed', error: { code: 'x', message: 'y' } }, 'w1'))).code,
    ).toBe('lease_lost');
    expect((await refusal(engine.heartbeat(taken.id, old.lease_token!))).code).toBe('lease_lost');
    expect((await refusal(engine.release(taken.id, old.lease_token!, 'w1'))).code).toBe('lease_lost');
    expect(await engine.getExecution(taken.id)).toEqual(before);
    expect((await engine.complete(taken.id, fresh.lease_token!, { status: 'succeeded' }, 'w2')).status).toBe('succeeded');
    await expectConsistent(taken.id);
  });

  it('a cancel request followed by a lapsed lease ends cancelled, never re-queued', async () => {
    const ex = await engine.submit(agent, { message: 'x' }, 't');
    const row = await claimOne('w1');
    clock.advance(LEASE_MS - 10_000);
    expect((await engine.cancel(ex.id, 'u')).cancel_requested_at).toBe(clock());
    clock.advance(10_001); // lease lapsed; cancel grace not yet over
    expect(await reap()).toEqual([[ex.id, 'cancelled', 'cancelled']]);
    const after = await expectConsistent(ex.id);
    expect(after.status).toBe('cancelled');
    expect(after.error_code).toBe('cancel_requested');
    expect(await engine.claim(agent, { owner: 'w2' })).toEqual([]);
    expect((await refusal(engine.complete(ex.id, row.lease_token!, { status: 'succeeded' }, 'w1'))).code).toBe('lease_lost');
    expect((await engine.getExecution(ex.id)).execution.status).toBe('cancelled');
  });

  it('time written into the row: a lapsed lease, an exhausted task, a passed deadline', async () => {
    const a = await newAgent({ max_parallel: 3 });
    const lapsed = await engine.submit(a, { message: 'lapsed' }, 't');
    clock.advance(1);
    const spent = await engine.submit(a, { message: 'spent' }, 't');
    clock.advance(1);
    const late = await engine.submit(a, { message: 'late' }, 't');
    const rows = await engine.claim(a, { owner: 'w', max: 3 });
    expect(rows.map((r) => r.id)).toEqual([lapsed.id, spent.id, late.id]);
    expect(await reap(a)).toEqual([]);

    const now = clock();
    // Two lapses of one agent in one pass are a shared cause (test/engine/lapse.test.ts); this test is
    // about each row's own lapse, so both rows have used up their shared-cause forgiveness.
    await ts.store.db
      .updateTable('executions')
      .set({ lease_expires_at: now - 1, lapses_forgiven: MAX_FORGIVEN_LAPSES })
      .where('id', '=', lapsed.id)
      .execute();
    await ts.store.db
      .updateTable('executions')
      .set({ lease_expires_at: now - 1, attempt: 4, lapses_forgiven: MAX_FORGIVEN_LAPSES })
      .where('id', '=', spent.id)
      .execute();
    await ts.store.db
      .updateTable('executions')
      .set({ deadline_at: now - 1 })
      .where('id', '=', late.id)
      .execute();

    const reaped = await reap(a);
    expect(reaped).toHaveLength(3);
    expect(reaped).toEqual(
      expect.arrayContaining([
        [lapsed.id, 'requeued', 'queued'],
        [spent.id, 'poisoned', 'failed'],
        [late.id, 'timed_out', 'failed'],
      ]),
    );
    expect((await expectConsistent(lapsed.id)).status).toBe('queued');
    expect((await expectConsistent(spent.id)).error_code).toBe('poisoned');
    expect((await expectConsistent(late.id)).error_code).toBe('timeout');
    expect(await reap(a)).toEqual([]);
  });

  it('reaping is idempotent and leaves healthy leases alone', async () => {
    const a = await newAgent({ max_parallel: 2 });
    await engine.submit(a, { message: 'healthy' }, 't');
    await engine.submit(a, { message: 'dead' }, 't');
    const [healthy, dead] = await engine.claim(a, { owner: 'w', max: 2 });
    clock.advance(LEASE_MS - 1);
    await engine.heartbeat(healthy!.id, healthy!.lease_token!);
    clock.advance(2);
    const [first, second] = await Promise.all([reap(a), reap(a)]);
    expect([...first!, ...second!]).toEqual([[dead!.id, 'requeued', 'queued']]);
    expect((await engine.getExecution(healthy!.id)).execution.status).toBe('running');
    await expectConsistent(healthy!.id);
    await expectConsistent(dead!.id);
  });
});

describe(`dispatch racing recovery (${STORE_KIND})`, () => {
  const ROUNDS = 30;

  /** Nothing of this agent is running on a lapsed lease. */
  async function expectNoDeadSeats(on: string) {
    const running = await ts.store.db
      .selectFrom('executions')
      .selectAll()
      .where('agent', '=', on)
      .where('status', '=', 'running')
      .execute();
    for (const r of running) expect(r.lease_expires_at, `running ${r.id} without a live lease`).toBeGreaterThan(clock());
  }

  it('complete(old token) racing reapOnce: exactly one consistent outcome', async () => {
    // One agent re-queues on a lapse, the other poisons at once: both kinds of reaper write race the result.
    const requeues = await newAgent({ max_parallel: 1 });
    const poisons = await newAgent({ max_parallel: 1, max_redeliveries: 0 });
    for (let i = 0; i < ROUNDS; i++) {
      const on = i % 2 === 0 ? requeues : poisons;
      const ex = await engine.submit(on, { message: `r${i}` }, 't');
      const row = await claimOne('w1', on);
      clock.advance(LEASE_MS + 1);
      // Start them in either order; on PostgreSQL they really run at once.
      const reaper = () => engine.reapOnce();
      const result = () => engine.complete(ex.id, row.lease_token!, { status: 'succeeded' }, 'w1');
      const [reaped, completed] =
        Math.floor(i / 2) % 2 === 0
          ? await Promise.allSettled([reaper(), result()])
          : await Promise.allSettled([result(), reaper()]).then(([c, r]) => [r, c] as const);
      if (reaped.status === 'rejected') throw reaped.reason;
      const mine = (reaped.value as Awaited<ReturnType<typeof reaper>>).filter((r) => r.id === ex.id).map((r) => r.kind);
      const final = await expectConsistent(ex.id);
      const log = await transitions(ex.id);

      if (on === requeues) {
        // The token survives a requeue, so the result always lands, before or after the reaper.
        expect(completed.status).toBe('fulfilled');
        expect(final.status).toBe('succeeded');
        expect(mine.length).toBeLessThanOrEqual(1);
        expect(log.some((t) => t[2] === 'requeued')).toBe(mine.length === 1);
      } else if (completed.status === 'fulfilled') {
        expect(final.status).toBe('succeeded');
        expect(mine).toEqual([]);
      } else {
        expect((completed.reason as BatonError).code).toBe('lease_lost');
        expect(final.status).toBe('failed');
        expect(final.error_code).toBe('poisoned');
        expect(mine).toEqual(['poisoned']);
      }
      expect(log.filter((t) => t[0] !== null && isTerminal(t[1]!))).toHaveLength(1);
      await expectNoDeadSeats(on);
    }
  });

  it('claim racing reapOnce: the seat is taken at most once, and only after the requeue', async () => {
    const on = await newAgent({ max_parallel: 1 });
    for (let i = 0; i < ROUNDS; i++) {
      const ex = await engine.submit(on, { message: `c${i}` }, 't');
      const old = await claimOne('w1', on);
      clock.advance(LEASE_MS + 1);
      const [, claimed] = await Promise.all([engine.reapOnce(), engine.claim(on, { owner: 'w2' })]);
      const row = await expectConsistent(ex.id);
      if (claimed.length === 1) {
        expect(claimed[0]!.id).toBe(ex.id);
        expect(row.status).toBe('running');
        expect(row.attempt).toBe(2);
        expect(row.lease_owner).toBe('w2');
        expect(row.lease_token).not.toBe(old.lease_token);
        expect(await transitions(ex.id)).toEqual([
          [null, 'queued'],
          ['queued', 'running'],
          ['running', 'queued', 'requeued'],
          ['queued', 'running'],
        ]);
        expect((await refusal(engine.complete(ex.id, old.lease_token!, { status: 'succeeded' }, 'w1'))).code).toBe('lease_lost');
        await engine.complete(ex.id, row.lease_token!, { status: 'succeeded' }, 'w2');
      } else {
        // The claim saw the seat still held by the dead lease; the reaper then put the row back.
        expect(claimed).toEqual([]);
        expect(row.status).toBe('queued');
        expect(row.attempt).toBe(1);
        await engine.complete(ex.id, old.lease_token!, { status: 'succeeded' }, 'w1');
      }
      await expectConsistent(ex.id);
      await expectNoDeadSeats(on);
    }
  });

  it('claim, stale complete and reapOnce all at once: either the new claim or the old result wins, never both', async () => {
    const on = await newAgent({ max_parallel: 1 });
    for (let i = 0; i < ROUNDS; i++) {
      const ex = await engine.submit(on, { message: `t${i}` }, 't');
      const old = await claimOne('w1', on);
      clock.advance(LEASE_MS + 1);
      const ops = [
        () => engine.reapOnce(),
        () => engine.claim(on, { owner: 'w2' }),
        () => engine.complete(ex.id, old.lease_token!, { status: 'succeeded' }, 'w1'),
      ] as const;
      // Rotate which one starts first.
      const started: Promise<unknown>[] = [];
      for (let k = 0; k < 3; k++) {
        const op = (i + k) % 3;
        started[op] = ops[op]!();
      }
      const [reaped, claimed, landed] = (await Promise.allSettled(started)) as [
        PromiseSettledResult<unknown>,
        PromiseSettledResult<ExecutionRow[]>,
        PromiseSettledResult<ExecutionRow>,
      ];
      expect(reaped.status).toBe('fulfilled');
      expect(claimed.status).toBe('fulfilled');
      const gotSeat = claimed.status === 'fulfilled' && claimed.value.length === 1;
      const row = await expectConsistent(ex.id);
      if (gotSeat) {
        expect(landed.status).toBe('rejected');
        expect(row.status).toBe('running');
        expect(row.lease_owner).toBe('w2');
        await engine.complete(ex.id, row.lease_token!, { status: 'succeeded' }, 'w2');
      } else {
        expect(landed.status).toBe('fulfilled');
        expect(row.status).toBe('succeeded');
      }
      await expectConsistent(ex.id);
      await expectNoDeadSeats(on);
    }
  });
});
