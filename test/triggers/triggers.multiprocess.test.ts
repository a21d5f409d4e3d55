import { afterAll, beforeAll, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { killLeftoverChildren, spawnFixture } from '../helpers/processes.ts';
import { describeMultiProcess, openTestStore, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;

beforeAll(async () => {
  ts = await openTestStore({ poolMax: 3 });
  engine = new Engine({ store: ts.store, nodeId: 'mp-test' });
});
afterAll(async () => {
  expect(await killLeftoverChildren()).toEqual([]);
  engine.close();
  await ts.cleanup();
});

describeMultiProcess('three scheduler processes on one PostgreSQL', () => {
  it('fire every due time exactly once: no duplicate, no gap, over many ticks, though one of them is SIGKILLed', async () => {
    await engine.agents.create({ name: 'mp', max_parallel: 1, max_backlog: 10_000 }, 'test');
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const s = await engine.schedules.create(
        'mp',
        { name: `every-second-${i}`, cron: '* * * * * *', message: 'tick', overlap_policy: 'allow' },
        'test',
      );
      ids.push(s.id);
    }
    const start = Date.now();
    const procs = ['s1', 's2', 's3'].map((node) =>
      spawnFixture('scheduler', ['--node', node, '--run-ms', '7000', '--interval-ms', '150'], ts.env),
    );
    // The third dies mid-run, wherever it is (perhaps inside a pass): its transaction rolls back
    // and the others take its schedules over.
    await new Promise((r) => setTimeout(r, 3_500));
    procs[2]!.proc.kill('SIGKILL');
    expect((await procs[2]!.exit(10_000)).signal).toBe('SIGKILL');
    const reports = await Promise.all(procs.slice(0, 2).map(async (p) => JSON.parse(await p.line((l) => l.startsWith('{'), 30_000))));
    await Promise.all(procs.slice(0, 2).map((p) => p.exit(10_000)));
    for (const r of reports) expect(r.errors, `${r.node} errors`).toEqual([]);
    // Stop the schedules where they are, then compare every due time with the rows.
    for (const id of ids) await engine.schedules.update(id, { enabled: false }, 'test');
    const rows = await ts.store.db
      .selectFrom('executions')
      .select(['schedule_id', 'scheduled_for', 'changed_by', 'status'])
      .where('schedule_id', 'in', ids)
      .execute();
    let total = 0;
    for (const id of ids) {
      const times = rows
        .filter((r) => r.schedule_id === id)
        .map((r) => r.scheduled_for!)
        .sort((a, b) => a - b);
      expect(times.length, `schedule ${id} fired`).toBeGreaterThanOrEqual(5);
      // One row per due second, and every second from the first due time to the last handled one.
      expect(new Set(times).size).toBe(times.length);
      expect(times[0]).toBeLessThanOrEqual(Math.ceil((start + 2000) / 1000) * 1000);
      expect(times[times.length - 1]! - times[0]!).toBe((times.length - 1) * 1000);
      total += times.length;
    }
    expect(rows.every((r) => r.status === 'queued')).toBe(true);
    expect(reports.reduce((a, r) => a + r.fired, 0)).toBeLessThanOrEqual(total);
    // The work was shared (each process's actor appears), not done by one while the others idled.
    const actors = new Set(rows.map((r) => r.changed_by));
    console.log(
      `fired ${total} runs over ${reports.map((r) => `${r.node}: ${r.fired} in ${r.passes} passes`).join(', ')}; actors ${[...actors].join(', ')}`,
    );
  });
});
