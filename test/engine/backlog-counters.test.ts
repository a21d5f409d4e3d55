import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { BatonError } from '../../src/domain/errors.ts';
import { backlogs } from '../../src/engine/backlog.ts';
import { Engine } from '../../src/engine/engine.ts';
import { liveCountsByAgent } from '../../src/engine/live-counts.ts';
import { tickSchedulesOnce } from '../../src/engine/triggers/scheduler.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

// An agent's backlog is kept by counters (agent_backlog.queued_in - agents.queued_out), which
// creation, the agents list and /metrics read instead of
// counting queued rows. On both stores, on the manual clock.

let ts: TestStore;
let engine: Engine;
const clock = manualClock(Date.UTC(2026, 0, 1, 0, 0, 30));
const DAY = 86_400_000;
let n = 0;
let agent: string;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'backlog-test', backlogExpiryMs: DAY });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});
beforeEach(async () => {
  agent = `agent-${++n}`;
  await engine.agents.create({ name: agent, max_parallel: 2, max_backlog: 6, lease_ttl_seconds: 30, max_redeliveries: 3 }, 'test');
});

/** The agent's queued and running rows, counted. */
async function rowsOf(name: string) {
  const rows = await ts.store.db
    .selectFrom('executions')
    .select(['status', (eb) => eb.fn.countAll<number>().as('n')])
    .where('agent', '=', name)
    .where('status', 'in', ['queued', 'running'])
    .groupBy('status')
    .execute();
  const of = (s: string) => Number(rows.find((r) => r.status === s)?.n ?? 0);
  return { queued: of('queued'), running: of('running') };
}

/** The counters agree with the rows, and the readers report them. */
async function expectCounted(name: string, queued: number, running: number) {
  expect(await rowsOf(name)).toEqual({ queued, running });
  expect((await backlogs(ts.store.db, [name])).get(name)).toBe(queued);
  const live = (await liveCountsByAgent(ts.store.db, [name])).get(name) ?? { queued: 0, running: 0 };
  expect(live).toEqual({ queued, running });
}

const refusalOf = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (e) => (e instanceof BatonError ? e.code : e),
  );

describe(`backlog counters (${STORE_KIND})`, () => {
  it('follow every way work is created, admitted, released, lapses, expires, ends and is deleted', async () => {
    await engine.submit(agent, { message: 'plain' }, 'test');
    await engine.submit(agent, { message: 'transaction path' }, 'test', async () => {});
    await expectCounted(agent, 2, 0);
    // A batch with more items than room: the backlog (6) takes four of five.
    const batch = await engine.submitMany(
      agent,
      Array.from({ length: 5 }, (_, i) => ({ message: `b${i}` })),
      'test',
    );
    expect(batch.filter((o) => o.kind === 'created')).toHaveLength(4);
    await expectCounted(agent, 6, 0);
    expect(await refusalOf(engine.submit(agent, { message: 'full' }, 'test'))).toBe('backlog_full');

    const [a, b] = await engine.claim(agent, { owner: 'w', max: 2 });
    await expectCounted(agent, 4, 2);
    await engine.release(a!.id, a!.lease_token!, 'w'); // back to queued
    await expectCounted(agent, 5, 1);
    await engine.complete(b!.id, b!.lease_token!, { status: 'succeeded' }, 'w');
    await expectCounted(agent, 5, 0);

    const queued = await ts.store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', agent)
      .where('status', '=', 'queued')
      .execute();
    await engine.cancel(queued[0]!.id, 'test');
    await expectCounted(agent, 4, 0);

    // A lease that lapses is re-queued by the reaper.
    const [c] = await engine.claim(agent, { owner: 'w' });
    await expectCounted(agent, 3, 1);
    clock.advance(31_000);
    await engine.reapOnce();
    expect((await ts.store.db.selectFrom('executions').select('status').where('id', '=', c!.id).executeTakeFirstOrThrow()).status).toBe(
      'queued',
    );
    await expectCounted(agent, 4, 0);

    // Queued past the backlog expiry: failed by the reaper.
    clock.advance(DAY + 1);
    await engine.reapOnce();
    await expectCounted(agent, 0, 0);

    // A group's members and a schedule's fire are created queued too.
    await engine.groups.create(
      {
        members: [
          { agent, message: 'm1' },
          { agent, message: 'm2' },
        ],
      },
      'test',
    );
    await expectCounted(agent, 2, 0);
    await engine.schedules.create(agent, { name: 'every-minute', cron: '* * * * *', message: 'tick' }, 'test');
    clock.advance(60_000);
    const fired = await tickSchedulesOnce(engine);
    expect(fired.length).toBeGreaterThan(0);
    await expectCounted(agent, 3, 0);
    await ts.store.db.updateTable('schedules').set({ enabled: 0, next_run_at: null }).where('agent', '=', agent).execute();

    // Deleting the agent cancels its queue and drops its counters; a new agent of that name starts at zero.
    await engine.agents.delete(agent, 'test');
    expect(await backlogs(ts.store.db, [agent])).toEqual(new Map());
    await engine.agents.create({ name: agent, max_parallel: 1, max_backlog: 1 }, 'test');
    await expectCounted(agent, 0, 0);
    await engine.submit(agent, { message: 'again' }, 'test');
    await expectCounted(agent, 1, 0);
  });

  it('are what creation reads: a counter that says full refuses every path, whatever the rows', async () => {
    await engine.submit(agent, { message: 'one' }, 'test');
    // Nothing but the counter says the backlog (6) is full: counting rows would find one.
    await sql`UPDATE agent_backlog SET queued_in = queued_in + 5 WHERE agent = ${agent}`.execute(ts.store.db);
    expect(await refusalOf(engine.submit(agent, { message: 'plain' }, 'test'))).toBe('backlog_full');
    expect(await refusalOf(engine.submit(agent, { message: 'tx' }, 'test', async () => {}))).toBe('backlog_full');
    const batch = await engine.submitMany(agent, [{ message: 'b' }], 'test');
    expect(batch.map((o) => o.kind)).toEqual(['refused']);
    const group = await refusalOf(engine.groups.create({ members: [{ agent, message: 'm' }] }, 'test'));
    expect(group).toBe('group_refused');
    await sql`UPDATE agent_backlog SET queued_in = queued_in - 5 WHERE agent = ${agent}`.execute(ts.store.db);
    await engine.submit(agent, { message: 'plain' }, 'test');
    await expectCounted(agent, 2, 0);
  });
});
