/**
 * Chains across processes (PostgreSQL: several OS processes sharing one database). Claimer
 * processes complete the sources of two agents at once; their subscriptions cross (each source
 * agent starts tasks on both targets, so completions take the targets' new-work locks in both
 * orders) and one target's backlog is small. Afterwards every source has exactly one link per
 * matching subscription and a task for each link that started one: nothing lost, nothing
 * doubled, and the small backlog admitted exactly its size.
 */
import { expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.ts';
import { type Child, spawnFixture, useStoreWithChildren } from '../helpers/processes.ts';
import { describeMultiProcess, STORE_KIND, type TestStore } from '../helpers/store.ts';

const PER_AGENT = 40;
const SMALL_BACKLOG = 5;
const DEADLINE_MS = 120_000;

let ts: TestStore;
let engine: Engine;

useStoreWithChildren((store, e) => {
  ts = store;
  engine = e;
});

describeMultiProcess(`chains across processes (${STORE_KIND})`, () => {
  it(
    'processes completing different sources at once: exactly one chained task per source and subscription, none lost',
    async () => {
      const [a, b, t1, t2, small] = ['mp-src-a', 'mp-src-b', 'mp-t1', 'mp-t2', 'mp-small'];
      for (const name of [a, b]) await engine.agents.create({ name, max_parallel: 6, max_backlog: PER_AGENT }, 'test');
      for (const name of [t1, t2]) await engine.agents.create({ name, max_parallel: 1, max_backlog: 10 * PER_AGENT }, 'test');
      await engine.agents.create({ name: small, max_parallel: 1, max_backlog: SMALL_BACKLOG }, 'test');
      const subs = [
        await engine.subscriptions.create({ source_agent: a, target_agent: t1, on: 'succeeded', message: 'a→1 {{source.id}}' }, 'test'),
        await engine.subscriptions.create({ source_agent: a, target_agent: t2, on: 'any', message: 'a→2 {{source.id}}' }, 'test'),
        await engine.subscriptions.create({ source_agent: b, target_agent: t2, on: 'succeeded', message: 'b→2 {{source.id}}' }, 'test'),
        await engine.subscriptions.create({ source_agent: b, target_agent: t1, on: 'any', message: 'b→1 {{source.id}}' }, 'test'),
        await engine.subscriptions.create({ source_agent: a, target_agent: small, on: 'succeeded', message: 'a→small' }, 'test'),
        await engine.subscriptions.create({ source_agent: b, target_agent: small, on: 'succeeded', message: 'b→small' }, 'test'),
      ];
      for (let i = 0; i < PER_AGENT; i++) {
        await engine.submit(a, { message: `a ${i}` }, 'test');
        await engine.submit(b, { message: `b ${i}` }, 'test');
      }
      // Two processes per source agent, three loops each: completions of both agents interleave.
      const children: Child[] = [a, a, b, b].map((agent, k) =>
        spawnFixture(
          'claimer',
          [
            ...['--agent', agent, '--node-id', `chainer-${k + 1}`, '--loops', '3', '--max-claim', '2'],
            ...['--hold-ms', '5', '--wait-ms', '50', '--total', String(PER_AGENT), '--deadline-ms', String(DEADLINE_MS)],
            '--wait-for-go',
          ],
          ts.env,
        ),
      );
      await Promise.all(children.map((c) => c.line((l) => l === 'ready', 60_000)));
      for (const c of children) c.proc.stdin!.end('go\n');
      const exits = await Promise.all(children.map((c) => c.exit(DEADLINE_MS + 5_000)));
      for (const [k, x] of exits.entries())
        expect(x, `chainer-${k + 1} stderr:\n${children[k]!.stderr()}`).toEqual({ code: 0, signal: null });
      for (const s of children.map((c) => JSON.parse(c.lines.at(-1)!))) expect(s.errors).toEqual([]);

      const db = ts.store.db;
      const sources = await db.selectFrom('executions').selectAll().where('agent', 'in', [a, b]).execute();
      expect(sources).toHaveLength(2 * PER_AGENT);
      expect(sources.every((s) => s.status === 'succeeded')).toBe(true);
      const links = await db.selectFrom('chain_links').selectAll().execute();
      const chained = await db.selectFrom('executions').selectAll().where('trigger_kind', '=', 'chain').execute();
      const taskById = new Map(chained.map((c) => [c.id, c]));
      for (const s of sources) {
        const mine = links.filter((l) => l.source_id === s.id);
        const expected = subs.filter((sub) => sub.source_agent === s.agent).map((sub) => sub.id);
        expect(mine.map((l) => l.subscription_id).sort(), `links of ${s.id}`).toEqual(expected.sort());
        for (const l of mine) {
          if (l.execution_id === null) {
            expect(l.refused).toBe('backlog_full');
            continue;
          }
          expect(taskById.get(l.execution_id), `task of link ${s.id}/${l.subscription_id}`).toMatchObject({
            caused_by: s.id,
            subscription_id: l.subscription_id,
            chain_depth: 1,
          });
        }
      }
      // No task without its link, and none twice for one (source, subscription).
      expect(chained).toHaveLength(links.filter((l) => l.execution_id !== null).length);
      expect(new Set(chained.map((c) => `${c.caused_by}/${c.subscription_id}`)).size).toBe(chained.length);
      const on = (agent: string) => chained.filter((c) => c.agent === agent).length;
      expect([on(t1), on(t2)]).toEqual([2 * PER_AGENT, 2 * PER_AGENT]);
      // The backlog count is exact under the target's lock, across processes.
      expect(on(small)).toBe(SMALL_BACKLOG);
      expect(links.filter((l) => l.refused === 'backlog_full')).toHaveLength(2 * PER_AGENT - SMALL_BACKLOG);
    },
    DEADLINE_MS + 60_000,
  );
});
