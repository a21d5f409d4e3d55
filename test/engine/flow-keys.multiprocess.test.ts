/**
 * Key caps across processes (PostgreSQL: several OS processes sharing one database). Three
 * claimer processes drain one agent whose keys are capped (one key with an override). Replayed
 * from the event log in id order (an admission is written after every completion it counted
 * on), the running tasks of each key never exceed its cap, and all the work is done.
 */
import { expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.ts';
import { type Child, spawnFixture, useStoreWithChildren } from '../helpers/processes.ts';
import { describeMultiProcess, STORE_KIND, type TestStore } from '../helpers/store.ts';

const PROCESSES = 3;
const KEYS = ['k0', 'k1', 'k2', 'k3'];
const PER_KEY = 30;
const EXECUTIONS = KEYS.length * PER_KEY;
const CAPS: Record<string, number> = { k0: 3, k1: 2, k2: 2, k3: 2 };
/** Generous: a 2-core machine shared with other test runs was measured far slower than idle. */
const DEADLINE_MS = 120_000;

let ts: TestStore;
let engine: Engine;

useStoreWithChildren((store, e) => {
  ts = store;
  engine = e;
});

describeMultiProcess(`key caps across processes (${STORE_KIND})`, () => {
  it(
    'no key runs more than its cap at any point of the event log, whatever process admitted',
    async () => {
      const agent = 'mp-keys';
      await engine.agents.create(
        { name: agent, max_parallel: 12, max_backlog: EXECUTIONS, lease_ttl_seconds: 30, key_max_parallel: 2, key_overrides: { k0: 3 } },
        'test',
      );
      for (let i = 0; i < EXECUTIONS; i++) await engine.submit(agent, { message: `task ${i}`, key: KEYS[i % KEYS.length] }, 'test');
      const children: Child[] = Array.from({ length: PROCESSES }, (_, k) =>
        spawnFixture(
          'claimer',
          [
            ...['--agent', agent, '--node-id', `keys-${k + 1}`, '--loops', '2', '--max-claim', '3'],
            ...['--hold-ms', '15', '--wait-ms', '50', '--total', String(EXECUTIONS), '--deadline-ms', String(DEADLINE_MS)],
            '--wait-for-go',
          ],
          ts.env,
        ),
      );
      await Promise.all(children.map((c) => c.line((l) => l === 'ready', 60_000)));
      for (const c of children) c.proc.stdin!.end('go\n');
      const exits = await Promise.all(children.map((c) => c.exit(DEADLINE_MS + 5_000)));
      for (const [k, x] of exits.entries()) expect(x, `keys-${k + 1} stderr:\n${children[k]!.stderr()}`).toEqual({ code: 0, signal: null });

      const events = await ts.store.db
        .selectFrom('execution_events as ev')
        .innerJoin('executions as e', 'e.id', 'ev.execution_id')
        .select(['ev.id', 'ev.from_status', 'ev.to_status', 'ev.actor', 'e.flow_key'])
        .where('ev.agent', '=', agent)
        .orderBy('ev.id')
        .execute();
      const running = new Map<string, number>();
      const peak = new Map<string, number>();
      const admitters = new Set<string>();
      for (const ev of events) {
        const key = ev.flow_key!;
        if (ev.to_status === 'running') {
          admitters.add(ev.actor.split('/')[0]!);
          running.set(key, (running.get(key) ?? 0) + 1);
          peak.set(key, Math.max(peak.get(key) ?? 0, running.get(key)!));
        } else if (ev.from_status === 'running') running.set(key, running.get(key)! - 1);
      }
      for (const key of KEYS) expect(peak.get(key), key).toBeLessThanOrEqual(CAPS[key]!);
      // The caps were reached (the test could fail), and more than one process admitted.
      expect(peak.get('k0')).toBe(3);
      expect(admitters.size).toBeGreaterThan(1);
      const done = await ts.store.db
        .selectFrom('executions')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('agent', '=', agent)
        .where('status', '=', 'succeeded')
        .executeTakeFirstOrThrow();
      expect(Number(done.n)).toBe(EXECUTIONS);
    },
    DEADLINE_MS + 60_000,
  );
});
