/**
 * Shared-cause lapses with real processes: several worker processes of one agent, each holding
 * one task, are SIGKILLed at once. After their leases lapse, one reaper pass re-queues every
 * task without charging the attempt and holds the agent; a new worker process then claims
 * (ending the hold) and finishes them all on their first charged attempt. Both stores.
 */
import { describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine/engine.ts';
import { type Child, spawnFixture, useStoreWithChildren } from '../helpers/processes.ts';
import { STORE_KIND, type TestStore } from '../helpers/store.ts';

const WORKERS = 3;

let ts: TestStore;
let engine: Engine;

useStoreWithChildren((store, e) => {
  ts = store;
  engine = e;
});

describe(`all of one agent's workers killed with SIGKILL at once (${STORE_KIND})`, () => {
  it('one reaper pass re-queues their tasks with no attempt charged and holds the agent; a new worker finishes them', async () => {
    const agent = 'lapse-sigkill';
    await engine.agents.create(
      { name: agent, max_parallel: WORKERS, lease_ttl_seconds: 1, timeout_seconds: 600, max_redeliveries: 0 },
      'test',
    );
    const ids = new Set<string>();
    for (let i = 0; i < WORKERS; i++) ids.add((await engine.submit(agent, { message: `task ${i}` }, 'test')).id);

    // max_redeliveries 0: were any of these lapses charged, the task would be poisoned.
    const holders: Child[] = Array.from({ length: WORKERS }, (_, k) =>
      spawnFixture('hold', ['--agent', agent, '--owner', `holder-${k + 1}`, '--wait-ms', '20000'], ts.env),
    );
    const held = await Promise.all(holders.map(async (h) => JSON.parse(await h.line((l) => l.startsWith('{'), 30_000))));
    expect(new Set(held.map((h: { id: string }) => h.id))).toEqual(ids);

    for (const h of holders) expect(h.proc.kill('SIGKILL')).toBe(true);
    for (const h of holders) expect(await h.exit(5_000)).toEqual({ code: null, signal: 'SIGKILL' });

    // A little over the TTL after the last lease was granted.
    const lastExpiry = Math.max(...held.map((h: { lease_expires_at: number }) => h.lease_expires_at));
    const lapse = lastExpiry + 200 - Date.now();
    if (lapse > 0) await new Promise((r) => setTimeout(r, lapse));
    const reaped = (await engine.reapOnce()).filter((r) => r.agent === agent);
    expect(reaped.map((r) => [r.kind, r.to])).toEqual(Array(WORKERS).fill(['requeued_shared', 'queued']));
    expect(new Set(reaped.map((r) => r.id))).toEqual(ids);
    for (const id of ids) expect((await engine.getExecution(id)).execution).toMatchObject({ status: 'queued', attempt: 0 });
    const before = (await engine.agents.get(agent)).agent;
    expect(before.lapse_hold_count).toBe(WORKERS);
    expect((await engine.getExecution([...ids][0]!)).waiting?.reason).toBe('lapse_hold');

    const rescuer = spawnFixture(
      'claimer',
      ['--agent', agent, '--node-id', 'rescuer', '--loops', '1', '--total', String(WORKERS), '--deadline-ms', '30000'],
      ts.env,
    );
    expect(await rescuer.exit(45_000)).toEqual({ code: 0, signal: null });

    for (const id of ids) {
      const { execution, events } = await engine.getExecution(id);
      expect(execution).toMatchObject({ status: 'succeeded', attempt: 1, lapses_forgiven: 1 });
      expect(events.map((e) => [e.from_status, e.to_status, e.reason])).toEqual([
        [null, 'queued', 'created'],
        ['queued', 'running', 'admitted'],
        ['running', 'queued', 'requeued_shared'],
        ['queued', 'running', 'admitted'],
        ['running', 'succeeded', expect.anything()],
      ]);
    }
    expect((await engine.agents.get(agent)).agent).toMatchObject({ lapse_hold_at: null, lapse_hold_count: null });
    const audit = await ts.store.db
      .selectFrom('audit_log')
      .select(['action', 'actor', 'detail'])
      .where('subject', '=', agent)
      .where('action', 'like', 'agent.lapse_hold%')
      .orderBy('id')
      .execute();
    expect(audit.map((a) => [a.action, a.actor])).toEqual([
      ['agent.lapse_hold', 'reaper:test-node'],
      ['agent.lapse_hold_cleared', expect.stringMatching(/^rescuer/)],
    ]);
    expect(JSON.parse(audit[1]!.detail!)).toMatchObject({ by: 'claim', lapsed: WORKERS });
  }, 90_000);
});
