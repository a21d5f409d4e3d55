/**
 * Turns among a pool's agents across processes (PostgreSQL: several OS processes sharing one
 * database). Agent A is flooded and claimed by two processes that take every seat they can; agent
 * B, with one seat of its own and a few tasks, is claimed by two other processes. Read back from
 * the event log, not from what the claimers believed:
 * - the pool's seats: replaying admissions and ends in event order never finds more running than its cap;
 * - B's turn: each of B's tasks is admitted within one turn of the pool's seats once B waits for
 *   it, counted as A's admissions between the last look of the test (one statement, one snapshot)
 *   that found the task queued and B not waiting in the pool, before a look found B waiting, and
 *   the task's admission: at most the pool's cap, one turn of its seats. Admissions take their
 *   event ids under the pool's lock, as B's wait is written, so those after that snapshot include
 *   every one after B's wait began (and maybe one before: the count errs on the strict side).
 *   Counted from the task's creation, it also held the seats freed before B's claimer was woken
 *   and looked (until then B waits for no turn, and they go to A by right): on a loaded machine
 *   more than the cap. A task no look saw B waiting for is counted from its creation, as before.
 *   Without turns B never waits, and A's claimers, many more and always looking, take seat after
 *   seat while B's claim waits.
 */
import { sql } from 'kysely';
import { expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.ts';
import { type Child, spawnFixture, useStoreWithChildren } from '../helpers/processes.ts';
import { describeMultiProcess, STORE_KIND, type TestStore } from '../helpers/store.ts';

/** Generous: a 2-core machine shared with other test runs was measured far slower than idle. */
const DEADLINE_MS = 120_000;
const CAP = 2;
const A_TASKS = 80;
const B_TASKS = 4;

let ts: TestStore;
let engine: Engine;

useStoreWithChildren((store, e) => {
  ts = store;
  engine = e;
});

const claimer = (agent: string, k: number, loops: number, waitMs: number, total: number, hold: [number, number]) =>
  spawnFixture(
    'claimer',
    [
      ...['--agent', agent, '--node-id', `turns-${agent}-${k}`, '--loops', String(loops), '--max-claim', '3', '--wait-ms', String(waitMs)],
      ...['--hold-min-ms', String(hold[0]), '--hold-ms', String(hold[1]), '--total', String(total)],
      ...['--deadline-ms', String(DEADLINE_MS), '--wait-for-go'],
    ],
    ts.env,
  );

/** Poll until `ready` (a wait for the processes to reach a state, not a timed assertion). */
async function until(what: string, ready: () => Promise<boolean>): Promise<void> {
  const stop = Date.now() + DEADLINE_MS;
  while (!(await ready())) {
    if (Date.now() > stop) throw new Error(`never: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describeMultiProcess(`turns among a pool's agents across processes (${STORE_KIND})`, () => {
  it(
    "a flooded agent's claimers in two processes leave the other agent's tasks a turn each, and never pass the pool's seats",
    async () => {
      const pool = 'mp-turns';
      const [a, b] = ['mp-turns-a', 'mp-turns-b'];
      await engine.pools.create({ name: pool, max_parallel: CAP }, 'test');
      await engine.agents.create({ name: a, max_parallel: 4, max_backlog: A_TASKS, lease_ttl_seconds: 30, pools: [pool] }, 'test');
      await engine.agents.create({ name: b, max_parallel: 1, max_backlog: B_TASKS, lease_ttl_seconds: 30, pools: [pool] }, 'test');
      for (let i = 0; i < A_TASKS; i++) await engine.submit(a, { message: `a ${i}` }, 'test');
      // A's claims outnumber B's and look again at once; B's look on their own only every 2 s.
      // A's tasks are held long enough that a seat turns over less often than a woken claim looks,
      // also on a loaded machine, where B's wake-up from the submit's notification to its first
      // look is slow: until that look B waits for no turn, so a seat freed before it goes to A by
      // right, and with shorter holds more than the pool's seats could turn over meanwhile.
      const children: Child[] = [
        claimer(a, 1, 4, 200, A_TASKS, [400, 600]),
        claimer(a, 2, 4, 200, A_TASKS, [400, 600]),
        claimer(b, 1, 1, 2000, B_TASKS, [0, 20]),
        claimer(b, 2, 1, 2000, B_TASKS, [0, 20]),
      ];
      await Promise.all(children.map((c) => c.line((l) => l === 'ready', 60_000)));
      for (const c of children) c.proc.stdin!.end('go\n');

      // Each of B's tasks arrives while A holds every seat of the pool (so B's claim must be refused
      // and wait for a turn), and the next only after it was admitted.
      const runningOf = async (agent: string) =>
        Number(
          (await ts.store.db.selectFrom('agents').select('running_count').where('name', '=', agent).executeTakeFirstOrThrow())
            .running_count,
        );
      // One statement (one snapshot): whether the task has left the queue, whether B waits for a
      // turn in the pool, and the newest admission of either agent.
      const look = async (task: string) =>
        (
          await sql<{ admitted: boolean; waiting: boolean; mark: string | null }>`
            SELECT EXISTS (SELECT 1 FROM execution_events WHERE execution_id = ${task} AND from_status = 'queued') AS admitted,
                   EXISTS (SELECT 1 FROM pool_waits WHERE pool = ${pool} AND agent = ${b}) AS waiting,
                   (SELECT max(id) FROM execution_events
                     WHERE agent IN (${a}, ${b}) AND from_status = 'queued' AND to_status = 'running') AS mark`.execute(ts.store.db)
        ).rows[0]!;
      /** Per B task seen waiting for its turn: the newest admission the last look before that saw. */
      const marks = new Map<string, number>();
      for (let i = 0; i < B_TASKS; i++) {
        await until('A holds every seat', async () => (await runningOf(a)) >= CAP);
        const task = await engine.submit(b, { message: `b ${i}` }, 'test');
        let before: number | undefined;
        await until("B's task is admitted", async () => {
          const s = await look(task.id);
          if (!s.admitted && !s.waiting) before = Number(s.mark ?? 0);
          if (s.waiting && before !== undefined) marks.set(task.id, before);
          return s.admitted;
        });
      }

      const exits = await Promise.all(children.map((c) => c.exit(DEADLINE_MS + 5_000)));
      for (const [k, x] of exits.entries())
        expect(x, `claimer ${k + 1} stderr:\n${children[k]!.stderr()}`).toEqual({ code: 0, signal: null });

      const events = await ts.store.db
        .selectFrom('execution_events')
        .select(['id', 'execution_id', 'agent', 'from_status', 'to_status'])
        .where('agent', 'in', [a, b])
        .orderBy('id')
        .execute();
      // The pool's seats, replayed in event order (every admission takes its event id under the pool's lock).
      let running = 0;
      let most = 0;
      for (const e of events) {
        if (e.to_status === 'running' && e.from_status !== 'running') running++;
        if (e.from_status === 'running' && e.to_status !== 'running') running--;
        most = Math.max(most, running);
      }
      expect(most).toBe(CAP); // reached, never passed

      // B's turns: A's admissions between each B task's wait for a turn (its mark) and its admission.
      const admitted = events.filter((e) => e.from_status === 'queued' && e.to_status === 'running');
      const bAdmissions = admitted.filter((e) => e.agent === b);
      expect(bAdmissions).toHaveLength(B_TASKS);
      const ahead: number[] = [];
      for (const adm of bAdmissions) {
        // B not seen waiting (no wait, or one shorter than a look; or no turns at all): from the task's creation.
        const from = marks.get(adm.execution_id) ?? events.find((e) => e.execution_id === adm.execution_id && e.from_status === null)!.id;
        ahead.push(admitted.filter((e) => e.agent === a && e.id > from && e.id < adm.id).length);
      }
      expect(
        ahead.every((n) => n <= CAP),
        `A's admissions before each of B's: ${ahead.join(', ')}`,
      ).toBe(true);
      // A stayed flooded throughout: it was still being admitted after B's last task.
      expect(admitted.filter((e) => e.agent === a && e.id > bAdmissions.at(-1)!.id).length).toBeGreaterThan(CAP);
      // Both of A's processes admitted (the seats were contended across processes, not within one).
      const actors = await ts.store.db
        .selectFrom('execution_events')
        .select(['agent', 'actor'])
        .where('agent', 'in', [a, b])
        .where('to_status', '=', 'running')
        .execute();
      expect(new Set(actors.filter((x) => x.agent === a).map((x) => x.actor.split('/')[0])).size).toBe(2);
    },
    DEADLINE_MS + 60_000,
  );
});
