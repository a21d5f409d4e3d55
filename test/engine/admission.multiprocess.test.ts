/**
 * Pause across processes (PostgreSQL: several OS processes sharing one database). Three claimer
 * processes drain one agent's queue; the agent is paused while they poll. Once the pause has
 * committed, no process admits anything (read back from the event log, not from what the
 * claimers believed), running work finishes, and after the resume they drain the rest.
 */
import { expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.ts';
import { type Child, spawnFixture, useStoreWithChildren } from '../helpers/processes.ts';
import { describeMultiProcess, STORE_KIND, type TestStore } from '../helpers/store.ts';

const PROCESSES = 3;
const EXECUTIONS = 240;
/** Generous: a 2-core machine shared with other test runs was measured far slower than idle. */
const DEADLINE_MS = 120_000;

let ts: TestStore;
let engine: Engine;

useStoreWithChildren((store, e) => {
  ts = store;
  engine = e;
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const count = async (agent: string, status: 'queued' | 'running' | 'succeeded') =>
  Number(
    (
      await ts.store.db
        .selectFrom('executions')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('agent', '=', agent)
        .where('status', '=', status)
        .executeTakeFirstOrThrow()
    ).n,
  );
/** Admissions so far, from the event log: every queued → running event of the agent. */
const admissions = async (agent: string) =>
  Number(
    (
      await ts.store.db
        .selectFrom('execution_events')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('agent', '=', agent)
        .where('to_status', '=', 'running')
        .executeTakeFirstOrThrow()
    ).n,
  );

describeMultiProcess(`pause across processes (${STORE_KIND})`, () => {
  it(
    'no process admits after the pause commits; running work finishes; after resume they drain the queue',
    async () => {
      const agent = 'mp-paused';
      await engine.agents.create({ name: agent, max_parallel: 3, max_backlog: EXECUTIONS, lease_ttl_seconds: 30 }, 'test');
      for (let i = 0; i < EXECUTIONS; i++) await engine.submit(agent, { message: `task ${i}` }, 'test');
      const children: Child[] = Array.from({ length: PROCESSES }, (_, k) =>
        spawnFixture(
          'claimer',
          [
            ...['--agent', agent, '--node-id', `pauser-${k + 1}`, '--loops', '2', '--max-claim', '2'],
            ...['--hold-ms', '20', '--wait-ms', '50', '--total', String(EXECUTIONS), '--deadline-ms', String(DEADLINE_MS)],
            '--wait-for-go',
          ],
          ts.env,
        ),
      );
      await Promise.all(children.map((c) => c.line((l) => l === 'ready', 60_000)));
      for (const c of children) c.proc.stdin!.end('go\n');

      // Pause while they are busy: some work done, most still queued.
      for (let i = 0; i < 2_000 && (await count(agent, 'succeeded')) < 20; i++) await sleep(10);
      await engine.agents.pause(agent, 'multi-process test', 'key:test');
      const atPause = await admissions(agent);
      expect(atPause).toBeLessThan(EXECUTIONS);

      // They keep polling (50 ms long-polls) for well over a second: nothing more is admitted,
      // and what was running finishes.
      for (let i = 0; i < 500 && (await count(agent, 'running')) > 0; i++) await sleep(10);
      await sleep(1_500);
      expect(await admissions(agent)).toBe(atPause);
      expect(await count(agent, 'running')).toBe(0);
      expect(await count(agent, 'queued')).toBe(EXECUTIONS - atPause);
      for (const c of children) expect(c.alive(), `${c.pid} exited while paused:\n${c.stderr()}`).toBe(true);
      // Every claimer was seen polling while paused: the claim stamp is recent.
      const { last_claim_at } = (await engine.agents.get(agent)).agent;
      expect(Date.now() - Number(last_claim_at)).toBeLessThan(10_000);

      await engine.agents.resume(agent, 'key:test');
      const exits = await Promise.all(children.map((c) => c.exit(DEADLINE_MS + 5_000)));
      for (const [k, x] of exits.entries())
        expect(x, `pauser-${k + 1} stderr:\n${children[k]!.stderr()}`).toEqual({ code: 0, signal: null });
      const summaries = children.map((c) => JSON.parse(c.lines.at(-1)!));
      for (const s of summaries) expect(s.errors).toEqual([]);
      expect(await count(agent, 'succeeded')).toBe(EXECUTIONS);
      expect(await admissions(agent)).toBe(EXECUTIONS);
      // More than one process admitted after the resume (the drain was shared, not one survivor's).
      const after = await ts.store.db
        .selectFrom('execution_events')
        .select('actor')
        .where('agent', '=', agent)
        .where('to_status', '=', 'running')
        .orderBy('id')
        .execute();
      const drainers = new Set(after.slice(atPause).map((e) => e.actor.split('/')[0]));
      expect(drainers.size).toBeGreaterThan(1);
    },
    DEADLINE_MS + 60_000,
  );
});
