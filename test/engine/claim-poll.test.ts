/**
 * The long-poll safety re-check, on both stores: parked claims that nothing wakes still get work
 * no signal announced (a `run_after` coming due), and idle parked claims cost one admission per
 * agent per poll, however many of them are parked. Admissions are counted by a spy on the
 * engine's one admission function, which calls through.
 */
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import type { ClaimWaits } from '../../src/engine/waiters.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
/** On the manual clock, polling only when the test says (pollWaitingClaims). */
let manual: Engine;
/** On the store's clock, polling every 50 ms. */
let ticking: Engine;
const clock = manualClock(Date.UTC(2026, 0, 12, 9));
let n = 0;
const name = (p: string) => `${p}-${++n}`;

type Admit = (agent: string) => Promise<ExecutionRow[]>;
const spyAdmissions = (engine: Engine): MockInstance<Admit> => vi.spyOn(engine as unknown as { admitOnce: Admit }, 'admitOnce');

/** The admissions of `agent` the spy saw, and a promise that they have all ended. */
function admissionsOf(spy: MockInstance<Admit>, agent: string) {
  const mine = spy.mock.calls.flatMap((args, i) => (args[0] === agent ? [spy.mock.results[i]!] : []));
  return { count: mine.length, settled: Promise.allSettled(mine.map((r) => r.value)) };
}

/** Wait until the spy has seen `count` admissions of `agent`, and until they have ended. */
async function untilAdmissions(spy: MockInstance<Admit>, agent: string, count: number): Promise<void> {
  await vi.waitFor(() => expect(admissionsOf(spy, agent).count).toBeGreaterThanOrEqual(count), { timeout: 20_000, interval: 5 });
  await admissionsOf(spy, agent).settled;
}

beforeAll(async () => {
  ts = await openTestStore();
  manual = new Engine({ store: ts.store, clock, nodeId: 'claim-poll-manual', claimPollMs: 600_000 });
  ticking = new Engine({ store: ts.store, nodeId: 'claim-poll-ticking', claimPollMs: 50 });
});
afterAll(async () => {
  manual?.close();
  ticking?.close();
  await ts?.cleanup();
});

describe(`the long-poll safety re-check (${STORE_KIND})`, () => {
  it('one poll wakes one claimer per agent; one that finds work nobody announced wakes the next, so the backlog drains', async () => {
    const a = name('due');
    const b = name('idle');
    await manual.agents.create({ name: a, max_parallel: 10 }, 'test');
    await manual.agents.create({ name: b, max_parallel: 10 }, 'test');
    // Queued before anyone waits, due in 10 s: the submits' signals find no claimer, and no signal says when they are due.
    const tasks: ExecutionRow[] = [];
    for (let i = 0; i < 3; i++) tasks.push(await manual.submit(a, { message: `due ${i}`, run_after: clock() + 10_000 }, 'key:test'));
    const spy = spyAdmissions(manual);
    const stop = new AbortController();
    const servedA: ExecutionRow[][] = [];
    const claimsA = Array.from({ length: 5 }, (_, i) =>
      manual.claim(a, { owner: `wa${i}`, max: 1, waitMs: 600_000, signal: stop.signal }).then((rows) => {
        if (rows.length > 0) servedA.push(rows);
        return rows;
      }),
    );
    const claimsB = Array.from({ length: 4 }, (_, i) => manual.claim(b, { owner: `wb${i}`, max: 1, waitMs: 600_000, signal: stop.signal }));
    try {
      await untilAdmissions(spy, a, 5);
      await untilAdmissions(spy, b, 4);
      // Idle: each poll is one look per agent, not one per parked claim.
      for (let poll = 1; poll <= 3; poll++) {
        manual.pollWaitingClaims();
        await untilAdmissions(spy, a, 5 + poll);
        await untilAdmissions(spy, b, 4 + poll);
      }
      expect(admissionsOf(spy, a).count).toBe(8);
      expect(admissionsOf(spy, b).count).toBe(7);
      // Due now, announced by nobody: one poll, and the claimer that finds a task passes the look on.
      clock.advance(10_001);
      manual.pollWaitingClaims();
      // The fourth look found nothing and passed nothing on: the fifth claimer still waits.
      await untilAdmissions(spy, a, 8 + 4);
      await untilAdmissions(spy, b, 7 + 1);
      await vi.waitFor(() => expect(servedA).toHaveLength(3), { timeout: 20_000, interval: 5 });
      expect(
        servedA
          .flat()
          .map((r) => r.id)
          .sort(),
      ).toEqual(tasks.map((t) => t.id).sort());
      expect(admissionsOf(spy, a).count).toBe(12);
      expect(admissionsOf(spy, b).count).toBe(8);
    } finally {
      stop.abort();
      spy.mockRestore();
    }
    expect((await Promise.all([...claimsA, ...claimsB])).filter((rows) => rows.length === 0)).toHaveLength(6);
  });

  it('on its timer, a parked claim gets a task that comes due with no signal', async () => {
    const a = name('timer');
    await ticking.agents.create({ name: a }, 'test');
    const task = await ticking.submit(a, { message: 'due soon', run_after: ticking.now() + 300 }, 'key:test');
    // Waits 20 s, far longer than the task takes to come due: only a look after it is due can serve it.
    const rows = await ticking.claim(a, { owner: 'w', max: 1, waitMs: 20_000 });
    expect(rows.map((r) => r.id)).toEqual([task.id]);
  });

  it('on its timer, many idle claims of one agent cost what one claim of another costs', async () => {
    const many = name('many');
    const one = name('one');
    await ticking.agents.create({ name: many }, 'test');
    await ticking.agents.create({ name: one }, 'test');
    const spy = spyAdmissions(ticking);
    // The timer's polls, counted (its interval calls pollOnce on the engine's ClaimWaits).
    const ticks = vi.spyOn((ticking as unknown as { claimWaits: ClaimWaits }).claimWaits, 'pollOnce');
    const stop = new AbortController();
    const claims = [
      ...Array.from({ length: 20 }, (_, i) => ticking.claim(many, { owner: `w${i}`, max: 1, waitMs: 60_000, signal: stop.signal })),
      ticking.claim(one, { owner: 'w', max: 1, waitMs: 60_000, signal: stop.signal }),
    ];
    try {
      await untilAdmissions(spy, many, 20);
      const before = { many: admissionsOf(spy, many).count, one: admissionsOf(spy, one).count, polls: ticks.mock.calls.length };
      // Ten looks of the lone claim's agent, each from a poll.
      await untilAdmissions(spy, one, before.one + 10);
      const polls = ticks.mock.calls.length - before.polls;
      const oneLooks = admissionsOf(spy, one).count - before.one;
      const manyLooks = admissionsOf(spy, many).count - before.many;
      // Each poll wakes one claimer of each agent. The lone claim's polls may merge: one that comes
      // while its look is out and its next waiter has fired already finds none armed (how often is
      // the machine's load's doing); the twenty claims always have one armed. So the twenty cost
      // at least what the one costs, and at most one look a poll (a poll may be under way as the
      // counts are read); twenty a poll if each claim polled.
      expect(manyLooks).toBeGreaterThanOrEqual(oneLooks - 1);
      expect(manyLooks).toBeLessThanOrEqual(polls + 1);
    } finally {
      stop.abort();
      spy.mockRestore();
      ticks.mockRestore();
    }
    expect((await Promise.all(claims)).flat()).toEqual([]);
  });
});
