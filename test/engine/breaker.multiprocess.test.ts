/**
 * The circuit breaker across processes (PostgreSQL: several OS processes sharing one database).
 * The breaker is opened by real failures; four claimer processes (two loops each) poll through the
 * cool-down and race when it ends. Exactly one probe is admitted: read back from the event log,
 * no admission of the agent lies between the probe's admission and its completion, and the
 * audit log shows open → half_open → closed on that one execution. Then they drain the queue.
 */
import { expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.ts';
import { type Child, spawnFixture, useStoreWithChildren } from '../helpers/processes.ts';
import { describeMultiProcess, STORE_KIND, type TestStore } from '../helpers/store.ts';

const PROCESSES = 4;
const EXECUTIONS = 60;
const COOLDOWN_MS = 1_500;
/** Generous: a 2-core machine shared with other test runs was measured far slower than idle. */
const DEADLINE_MS = 120_000;

let ts: TestStore;
let engine: Engine;

useStoreWithChildren((store, e) => {
  ts = store;
  engine = e;
});

describeMultiProcess(`circuit breaker across processes (${STORE_KIND})`, () => {
  it(
    'half-open admits exactly one probe whatever the number of claimers; its success closes the breaker',
    async () => {
      const agent = 'mp-breaker';
      const breaker = {
        consecutive: 3,
        ratio: 1,
        window: 10,
        cooldown_ms: COOLDOWN_MS,
        max_cooldown_ms: 10_000,
        count: ['agent_error' as const],
      };
      await engine.agents.create({ name: agent, max_parallel: 4, max_backlog: EXECUTIONS + 10, lease_ttl_seconds: 30, breaker }, 'test');
      const children: Child[] = Array.from({ length: PROCESSES }, (_, k) =>
        spawnFixture(
          'claimer',
          [
            ...['--agent', agent, '--node-id', `prober-${k + 1}`, '--loops', '2', '--max-claim', '3'],
            // Held up to 300 ms: the probe is out long enough for every loop to try (50 ms polls).
            ...['--hold-ms', '300', '--wait-ms', '50', '--total', String(EXECUTIONS), '--deadline-ms', String(DEADLINE_MS)],
            '--wait-for-go',
          ],
          ts.env,
        ),
      );
      await Promise.all(children.map((c) => c.line((l) => l === 'ready', 60_000)));

      // Open it with three real failures, then queue the work and let every claimer poll.
      for (let i = 0; i < 3; i++) {
        await engine.submit(agent, { message: `failing ${i}` }, 'test');
        const [row] = await engine.claim(agent, { owner: 'test' });
        await engine.complete(
          row!.id,
          row!.lease_token!,
          { status: 'failed', error: { code: 'model_error', message: 'HTTP 401' } },
          'test',
        );
      }
      const opened = (await engine.agents.get(agent)).agent;
      expect(opened.breaker_state).toBe('open');
      for (let i = 0; i < EXECUTIONS; i++) await engine.submit(agent, { message: `task ${i}` }, 'test');
      for (const c of children) c.proc.stdin!.end('go\n');

      const exits = await Promise.all(children.map((c) => c.exit(DEADLINE_MS + 5_000)));
      for (const [k, x] of exits.entries())
        expect(x, `prober-${k + 1} stderr:\n${children[k]!.stderr()}`).toEqual({ code: 0, signal: null });
      for (const s of children.map((c) => JSON.parse(c.lines.at(-1)!))) expect(s.errors).toEqual([]);

      const events = await ts.store.db
        .selectFrom('execution_events')
        .select(['id', 'execution_id', 'to_status', 'at', 'actor'])
        .where('agent', '=', agent)
        .orderBy('id')
        .execute();
      const admissions = events.filter((e) => e.to_status === 'running' && e.actor !== 'test');
      expect(admissions).toHaveLength(EXECUTIONS);
      const probe = admissions[0]!;
      // Nothing was admitted while it was open.
      expect(Number(probe.at)).toBeGreaterThanOrEqual(Number(opened.breaker_until));
      const probeDone = events.find((e) => e.execution_id === probe.execution_id && e.to_status === 'succeeded')!;
      const during = admissions.filter((e) => e.id > probe.id && e.id < probeDone.id);
      expect(during, 'admissions while the probe ran').toEqual([]);
      // After it the drain was shared (the claimers were all there, and were held back).
      expect(new Set(admissions.slice(1).map((e) => e.actor.split('/')[0])).size).toBeGreaterThan(1);

      const audit = await ts.store.db
        .selectFrom('audit_log')
        .select(['execution_id', 'detail'])
        .where('action', '=', 'agent.breaker')
        .where('subject', '=', agent)
        .orderBy('id')
        .execute();
      expect(audit.map((a) => [JSON.parse(a.detail!).to, a.execution_id])).toEqual([
        ['open', expect.any(String)],
        ['half_open', probe.execution_id],
        ['closed', probe.execution_id],
      ]);
      expect((await engine.agents.get(agent)).agent).toMatchObject({ breaker_state: 'closed', breaker_probe_id: null });
    },
    DEADLINE_MS + 60_000,
  );
});
