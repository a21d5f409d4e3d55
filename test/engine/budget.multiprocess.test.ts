/**
 * Budgets across processes (PostgreSQL: several OS processes sharing one database). Three
 * claimer processes drain one agent's queue, each completion reporting 10 tokens, under a
 * 100-token budget. Admission reads the ledger under the agent lock, so once the completions
 * that reach the limit have committed nobody admits: at most the tasks already running when
 * the limit was reached overspend it (max_parallel - 1 beyond the one that crossed). Raising the
 * limit then lets them drain the rest.
 */
import { expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.ts';
import { type Child, spawnFixture, useStoreWithChildren } from '../helpers/processes.ts';
import { describeMultiProcess, STORE_KIND, type TestStore } from '../helpers/store.ts';

const PROCESSES = 3;
const EXECUTIONS = 60;
const MAX_PARALLEL = 3;
const TOKENS_PER_TASK = 10;
const LIMIT = 100;
/** Generous: a 2-core machine shared with other test runs was measured far slower than idle. */
const DEADLINE_MS = 120_000;

let ts: TestStore;
let engine: Engine;

useStoreWithChildren((store, e) => {
  ts = store;
  engine = e;
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const count = async (agent: string, status: 'running' | 'succeeded') =>
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

describeMultiProcess(`budget across processes (${STORE_KIND})`, () => {
  it(
    'concurrent admissions never overspend beyond the tasks already running; raising the limit drains the rest',
    async () => {
      const agent = 'mp-budget';
      // A month window: the test cannot straddle a roll unless it runs across a month's end.
      const budget = (limit: number) => ({ limits: [{ metric: 'total_tokens' as const, window: 'month' as const, limit }] });
      await engine.agents.create({ name: agent, max_parallel: MAX_PARALLEL, max_backlog: EXECUTIONS, budget: budget(LIMIT) }, 'test');
      for (let i = 0; i < EXECUTIONS; i++) await engine.submit(agent, { message: `task ${i}` }, 'test');
      const children: Child[] = Array.from({ length: PROCESSES }, (_, k) =>
        spawnFixture(
          'claimer',
          [
            ...[
              '--agent',
              agent,
              '--node-id',
              `spender-${k + 1}`,
              '--loops',
              '2',
              '--max-claim',
              '2',
              '--usage-tokens',
              String(TOKENS_PER_TASK),
            ],
            ...['--hold-ms', '20', '--wait-ms', '50', '--total', String(EXECUTIONS), '--deadline-ms', String(DEADLINE_MS)],
            '--wait-for-go',
          ],
          ts.env,
        ),
      );
      await Promise.all(children.map((c) => c.line((l) => l === 'ready', 60_000)));
      for (const c of children) c.proc.stdin!.end('go\n');

      // They spend until the budget holds, then keep polling (50 ms long-polls) for well over a second.
      for (let i = 0; i < 3_000 && (await engine.agents.budget(agent)).limits[0]!.spent < LIMIT; i++) await sleep(10);
      for (let i = 0; i < 500 && (await count(agent, 'running')) > 0; i++) await sleep(10);
      await sleep(1_500);
      const admitted = await admissions(agent);
      const [l] = (await engine.agents.budget(agent)).limits;
      // The ledger holds exactly what the completions reported: nothing lost under concurrency.
      expect(l!.spent).toBe(admitted * TOKENS_PER_TASK);
      expect(await count(agent, 'running')).toBe(0);
      // Reached, and passed by at most the tasks that were running when it was reached.
      expect(admitted).toBeGreaterThanOrEqual(LIMIT / TOKENS_PER_TASK);
      expect(admitted).toBeLessThanOrEqual(LIMIT / TOKENS_PER_TASK + MAX_PARALLEL - 1);
      for (const c of children) expect(c.alive(), `${c.pid} exited while held:\n${c.stderr()}`).toBe(true);

      await engine.agents.update(agent, { budget: budget(EXECUTIONS * TOKENS_PER_TASK * 2) }, 'key:test');
      const exits = await Promise.all(children.map((c) => c.exit(DEADLINE_MS + 5_000)));
      for (const [k, x] of exits.entries())
        expect(x, `spender-${k + 1} stderr:\n${children[k]!.stderr()}`).toEqual({ code: 0, signal: null });
      for (const s of children.map((c) => JSON.parse(c.lines.at(-1)!))) expect(s.errors).toEqual([]);
      expect(await count(agent, 'succeeded')).toBe(EXECUTIONS);
      expect((await engine.agents.budget(agent)).limits[0]!.spent).toBe(EXECUTIONS * TOKENS_PER_TASK);
    },
    DEADLINE_MS + 60_000,
  );
});
