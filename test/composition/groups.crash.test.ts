/**
 * Groups and SIGKILL: a real `baton up` process is killed while it completes the last members of
 * many groups. The last member's completion, the group's count and decision, and the join commit
 * in one transaction, so after the kill every group is either decided with exactly one join (its
 * last member succeeded) or still running with none (its last member still running): never a
 * decided group without its join, never a join twice. After a restart the rest complete and every
 * group ends with exactly one join. Both stores.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/client.ts';
import { Engine } from '../../src/engine/engine.ts';
import { freePort, startBatonUp, type Child } from '../helpers/process.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

const GROUPS = 40;

let ts: TestStore;
let engine: Engine;
const children: Child[] = [];

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'test-node' });
});
afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
  await Promise.all(children.map((c) => c.exited));
  engine?.close();
  await ts?.cleanup();
});

/** Every group with its join count, and its last member's status. */
async function snapshot(groupIds: string[], last: Map<string, string>) {
  const groups = await ts.store.db.selectFrom('execution_groups').selectAll().where('id', 'in', groupIds).execute();
  const joins = await ts.store.db.selectFrom('executions').select('group_id').where('agent', '=', 'crash-join').execute();
  const members = await ts.store.db
    .selectFrom('executions')
    .select(['id', 'status'])
    .where('id', 'in', [...last.values()])
    .execute();
  const status = new Map(members.map((m) => [m.id, m.status]));
  return groups.map((g) => ({
    id: g.id,
    status: g.status,
    finished: Number(g.finished),
    joins: joins.filter((j) => j.group_id === g.id).length,
    join_execution_id: g.join_execution_id,
    last: status.get(last.get(g.id)!)!,
  }));
}

describe(`SIGKILL of baton up while it completes groups' last members (${STORE_KIND})`, () => {
  it('each decided group has exactly one join, an undecided one none; after a restart all end with one', async () => {
    for (const name of ['crash-m', 'crash-join']) {
      await engine.agents.create({ name, max_parallel: 1000, max_backlog: 1000, lease_ttl_seconds: 300, breaker: null }, 'test');
    }
    const ids: string[] = [];
    for (let i = 0; i < GROUPS; i++) {
      const g = await engine.groups.create(
        {
          members: [
            { agent: 'crash-m', message: `first ${i}`, priority: 0 },
            { agent: 'crash-m', message: `last ${i}`, priority: 1 },
          ],
          join: { agent: 'crash-join', message: 'join {{group.id}}' },
        },
        'test',
      );
      ids.push(g.id);
    }
    const leases = await engine.claim('crash-m', { owner: 'test', max: 100 });
    expect(leases).toHaveLength(GROUPS * 2);
    // The first member of every group ends here; the last ones end in the server that is killed.
    for (const l of leases.filter((r) => r.group_index === 0)) await engine.complete(l.id, l.lease_token!, { status: 'succeeded' }, 'test');
    const lastLeases = leases.filter((r) => r.group_index === 1);
    const last = new Map(lastLeases.map((r) => [r.group_id!, r.id]));

    const port = await freePort();
    let server = await startBatonUp(ts.env, port);
    children.push(server);
    const key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
    let api = new BatonClient({ server: server.url, key });
    let answered = 0;
    const sent = lastLeases.map((l) =>
      api
        .complete(l.id, { lease_token: l.lease_token!, status: 'succeeded', result: { n: 1 } })
        .then(() => answered++)
        .catch(() => undefined),
    );
    // Kill once some completions have answered, while others are in flight.
    for (let i = 0; i < 2000 && answered < GROUPS / 4; i++) await new Promise((r) => setTimeout(r, 2));
    server.proc.kill('SIGKILL');
    await server.exited;
    await Promise.all(sent);

    const after = await snapshot(ids, last);
    for (const g of after) {
      if (g.status === 'running')
        expect(g, 'undecided: its last member did not end, no join').toMatchObject({ joins: 0, finished: 1, last: 'running' });
      else
        expect(g, 'decided: its last member ended, one join').toMatchObject({
          status: 'succeeded',
          joins: 1,
          finished: 2,
          last: 'succeeded',
        });
    }
    const decided = after.filter((g) => g.status !== 'running').length;
    expect(decided).toBeGreaterThanOrEqual(answered); // an answered completion committed

    server = await startBatonUp(ts.env, port);
    children.push(server);
    api = new BatonClient({ server: server.url, key });
    const pending = lastLeases.filter((l) => after.find((g) => g.id === l.group_id)!.last === 'running');
    for (const l of pending) await api.complete(l.id, { lease_token: l.lease_token!, status: 'succeeded', result: { n: 2 } });
    const settled = await snapshot(ids, last);
    for (const g of settled) expect(g).toMatchObject({ status: 'succeeded', joins: 1, finished: 2, last: 'succeeded' });
    for (const g of settled)
      expect((await api.getGroup(g.id)).join).toMatchObject({ agent: 'crash-join', execution_id: g.join_execution_id });
    server.proc.kill('SIGTERM');
    await server.exited;
  }, 120_000);
});
