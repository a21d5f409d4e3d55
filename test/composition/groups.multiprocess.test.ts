/**
 * Groups across processes (PostgreSQL: several OS processes sharing one database). Many groups
 * of two members, one member on each of two agents; the test claims every member, hands the
 * left members' leases to one process and the right members' to another, and lets both complete
 * them in the same group order at once: each group's two members end at (nearly) the same
 * instant in two processes. The count is one UPDATE of the group row (its lock orders them) and
 * the decision a compare-and-set from 'running': every group must have exactly one join.
 */
import { expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.ts';
import { spawnFixture, useStoreWithChildren } from '../helpers/processes.ts';
import { describeMultiProcess, STORE_KIND, type TestStore } from '../helpers/store.ts';

const GROUPS = 60;
const DEADLINE_MS = 120_000;

let ts: TestStore;
let engine: Engine;

useStoreWithChildren((store, e) => {
  ts = store;
  engine = e;
});

describeMultiProcess(`groups across processes (${STORE_KIND})`, () => {
  it(
    'two members of a group ending at once in two processes make exactly one join, for every group',
    async () => {
      for (const name of ['mp-left', 'mp-right', 'mp-join']) {
        await engine.agents.create({ name, max_parallel: GROUPS, max_backlog: GROUPS * 2, breaker: null }, 'test');
      }
      const ids: string[] = [];
      for (let i = 0; i < GROUPS; i++) {
        const g = await engine.groups.create(
          {
            members: [
              { agent: 'mp-left', message: `left ${i}` },
              { agent: 'mp-right', message: `right ${i}` },
            ],
            join: { agent: 'mp-join', message: 'join {{group.id}}: {{members.0.result#/by}} + {{members.1.result#/by}}' },
          },
          'test',
        );
        ids.push(g.id);
      }
      // Take every member's lease here; each process completes one side, in group order.
      const leases = async (agent: string) => {
        const rows = await engine.claim(agent, { owner: 'test', max: 100 });
        const byGroup = new Map(rows.map((r) => [r.group_id!, { id: r.id, token: r.lease_token! }]));
        expect(byGroup.size).toBe(GROUPS);
        return ids.map((g) => byGroup.get(g)!);
      };
      const sides = [await leases('mp-left'), await leases('mp-right')];
      const children = sides.map((_, k) => spawnFixture('completer', ['--node-id', `side-${k}`, '--concurrency', '3'], ts.env));
      for (const [k, c] of children.entries()) c.proc.stdin!.write(JSON.stringify(sides[k]) + '\n');
      await Promise.all(children.map((c) => c.line((l) => l === 'ready', 60_000)));
      for (const c of children) c.proc.stdin!.end('go\n');
      const exits = await Promise.all(children.map((c) => c.exit(DEADLINE_MS)));
      for (const [k, x] of exits.entries()) expect(x, `side-${k} stderr:\n${children[k]!.stderr()}`).toEqual({ code: 0, signal: null });
      for (const c of children) expect(JSON.parse(c.lines.at(-1)!)).toMatchObject({ completed: GROUPS, errors: [] });

      const groups = await ts.store.db.selectFrom('execution_groups').selectAll().execute();
      expect(groups).toHaveLength(GROUPS);
      const joins = await ts.store.db.selectFrom('executions').selectAll().where('agent', '=', 'mp-join').execute();
      expect(joins).toHaveLength(GROUPS);
      const joinsByGroup = new Map<string, number>();
      for (const j of joins) joinsByGroup.set(j.group_id!, (joinsByGroup.get(j.group_id!) ?? 0) + 1);
      for (const g of groups) {
        expect(g).toMatchObject({ status: 'succeeded', finished: 2, succeeded: 2, failed: 0, join_refused: null });
        expect(joinsByGroup.get(g.id), `joins of ${g.id}`).toBe(1);
        expect(joins.find((j) => j.group_id === g.id)!.id).toBe(g.join_execution_id);
      }
      // Each join saw both members' results: whichever process decided read the other's commit.
      for (const j of joins) expect(j.message).toMatch(/: side-0 \+ side-1$/);
    },
    DEADLINE_MS + 60_000,
  );
});
