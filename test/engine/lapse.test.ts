import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MAX_FORGIVEN_LAPSES, PUSH_LAPSE_HOLD_MS } from '../../src/domain/admission.ts';
import { Engine } from '../../src/engine/engine.ts';
import { agentView } from '../../src/engine/views.ts';
import { createNodeMetrics } from '../../src/metrics.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

// Shared-cause lapses (src/domain/admission.ts, transitions/expire.ts): deterministic, on the
// manual clock, on both stores. Leases lapse because the clock moves; the reaper runs when called.

const LEASE_MS = 30_000;

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
let n = 0;
let agent: string;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'test-node', backlogExpiryMs: 3_600_000 });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});
beforeEach(async () => {
  agent = `lapse-${++n}`;
  await engine.agents.create(
    { name: agent, max_parallel: 4, max_backlog: 20, lease_ttl_seconds: LEASE_MS / 1000, timeout_seconds: 600, max_redeliveries: 1 },
    'test',
  );
});

const claimOne = async (owner: string, on = agent): Promise<ExecutionRow> => {
  const [row] = await engine.claim(on, { owner });
  if (!row) throw new Error(`nothing to claim on ${on}`);
  return row;
};
const row = async (id: string) => (await engine.getExecution(id)).execution;
const agentRow = async (name = agent) => (await engine.agents.get(name)).agent;
const reapMine = async () => (await engine.reapOnce()).filter((r) => r.agent === agent).map((r) => [r.id, r.kind, r.to]);
const audits = async (action: string, subject = agent) =>
  ts.store.db.selectFrom('audit_log').selectAll().where('action', '=', action).where('subject', '=', subject).orderBy('id').execute();

/** Submit `count` tasks and claim each by its own worker. */
async function runMany(count: number): Promise<ExecutionRow[]> {
  const out: ExecutionRow[] = [];
  for (let i = 0; i < count; i++) {
    await engine.submit(agent, { message: `t${i}` }, 't');
    out.push(await claimOne(`w${i}`));
  }
  return out;
}

describe(`shared-cause lapses (${STORE_KIND})`, () => {
  it('two leases of one agent lapsing in one pass: re-queued with no attempt charged, the agent held, the reason shown', async () => {
    const [a, b] = await runMany(2);
    expect([a!.attempt, b!.attempt]).toEqual([1, 1]);
    const since = clock() + LEASE_MS + 1;
    clock.advance(LEASE_MS + 1);

    expect((await reapMine()).sort()).toEqual(
      [
        [a!.id, 'requeued_shared', 'queued'],
        [b!.id, 'requeued_shared', 'queued'],
      ].sort(),
    );
    for (const id of [a!.id, b!.id]) expect(await row(id)).toMatchObject({ status: 'queued', attempt: 0, lapses_forgiven: 1 });
    expect(await agentRow()).toMatchObject({ lapse_hold_at: since, lapse_hold_count: 2 });

    const hold = await audits('agent.lapse_hold');
    expect(hold).toHaveLength(1);
    expect(hold[0]!.actor).toBe('reaper:test-node');
    const detail = JSON.parse(hold[0]!.detail!) as { lapsed: number; execution_ids: string[] };
    expect({ ...detail, execution_ids: detail.execution_ids.sort() }).toEqual({ lapsed: 2, execution_ids: [a!.id, b!.id].sort() });

    const { waiting } = await engine.getExecution(a!.id);
    expect(waiting).toMatchObject({ reason: 'lapse_hold', lapse: { since: new Date(since).toISOString(), lapsed: 2 } });
    expect(waiting!.summary).toContain('2 of the agent');
    const events = (await engine.getExecution(a!.id)).events;
    expect(events.at(-1)).toMatchObject({ from_status: 'running', to_status: 'queued', reason: 'requeued_shared' });
  });

  it('the next claim ends the hold and is admitted at once; one audit row says so', async () => {
    const [a, b] = await runMany(2);
    clock.advance(LEASE_MS + 1);
    await reapMine();
    clock.advance(5_000);
    const again = await claimOne('w-new');
    expect([a!.id, b!.id]).toContain(again.id);
    expect(again.attempt).toBe(1); // the first delivery charged again: the lapse was not counted
    expect(await agentRow()).toMatchObject({ lapse_hold_at: null, lapse_hold_count: null });
    const cleared = await audits('agent.lapse_hold_cleared');
    expect(cleared.map((c) => [c.actor, JSON.parse(c.detail!)])).toEqual([['w-new', { by: 'claim', lapsed: 2, held_ms: 5_000 }]]);
    const other = (await row(a!.id)).status === 'queued' ? a! : b!;
    expect((await engine.getExecution(other.id)).waiting?.reason).not.toBe('lapse_hold');
  });

  it('while the agent is held, a lone later lapse is part of the same outage', async () => {
    const [a, b] = await runMany(2);
    clock.advance(LEASE_MS - 1_000);
    await engine.submit(agent, { message: 'late' }, 't');
    const late = await claimOne('w-late'); // taken just before the outage, dies with the rest
    clock.advance(1_001);
    expect((await reapMine()).map((r) => r[0]).sort()).toEqual([a!.id, b!.id].sort());
    clock.advance(LEASE_MS);
    expect(await reapMine()).toEqual([[late.id, 'requeued_shared', 'queued']]);
    expect(await row(late.id)).toMatchObject({ attempt: 0 });
    expect(await agentRow()).toMatchObject({ lapse_hold_count: 3 });
    expect(await audits('agent.lapse_hold')).toHaveLength(2);
  });

  it('a heartbeat from a surviving worker of the agent ends the hold', async () => {
    const [a, b] = await runMany(2);
    clock.advance(LEASE_MS - 1_000);
    await engine.submit(agent, { message: 'survivor' }, 't');
    const survivor = await claimOne('w-survivor');
    clock.advance(1_001); // a and b lapse; the survivor's lease (taken later) has not
    expect((await reapMine()).map((r) => r[1])).toEqual(['requeued_shared', 'requeued_shared']);
    expect((await agentRow()).lapse_hold_at).not.toBeNull();
    await engine.heartbeat(survivor.id, survivor.lease_token!);
    expect((await agentRow()).lapse_hold_at).toBeNull();
    expect(JSON.parse((await audits('agent.lapse_hold_cleared'))[0]!.detail!)).toMatchObject({ by: 'heartbeat', lapsed: 2 });
    expect((await row(a!.id)).attempt + (await row(b!.id)).attempt).toBe(0);
  });

  it("one lapse keeps today's behaviour: the attempt stays charged, no hold, and the next lapse poisons it", async () => {
    const [a] = await runMany(1);
    clock.advance(LEASE_MS + 1);
    expect(await reapMine()).toEqual([[a!.id, 'requeued', 'queued']]);
    expect(await row(a!.id)).toMatchObject({ status: 'queued', attempt: 1, lapses_forgiven: 0 });
    expect((await agentRow()).lapse_hold_at).toBeNull();
    expect(await audits('agent.lapse_hold')).toHaveLength(0);
    await claimOne('w2'); // attempt 2 > max_redeliveries 1
    clock.advance(LEASE_MS + 1);
    expect(await reapMine()).toEqual([[a!.id, 'poisoned', 'failed']]);
  });

  it('a lapse that would poison is forgiven when shared, and its agent-mate too', async () => {
    const [a] = await runMany(1);
    clock.advance(LEASE_MS + 1);
    await reapMine(); // a: charged, attempt 1
    await claimOne('w1'); // a again: attempt 2, would be poisoned on the next lapse
    await engine.submit(agent, { message: 'b' }, 't');
    const b = await claimOne('w2');
    clock.advance(LEASE_MS + 1);
    expect((await reapMine()).sort()).toEqual(
      [
        [a!.id, 'requeued_shared', 'queued'],
        [b.id, 'requeued_shared', 'queued'],
      ].sort(),
    );
    expect(await row(a!.id)).toMatchObject({ status: 'queued', attempt: 1 });
  });

  it(`forgiveness is capped at ${MAX_FORGIVEN_LAPSES} per execution: tasks that kill their workers together are still poisoned`, async () => {
    const [a, b] = await runMany(2);
    const kinds: string[][] = [];
    for (let round = 0; round < MAX_FORGIVEN_LAPSES + 2; round++) {
      clock.advance(LEASE_MS + 1);
      const reaped = await reapMine();
      kinds.push(reaped.map((r) => r[1] as string));
      if (reaped.every((r) => r[2] !== 'queued')) break;
      await claimOne('wa');
      await claimOne('wb');
    }
    expect(kinds.slice(0, MAX_FORGIVEN_LAPSES)).toEqual(Array(MAX_FORGIVEN_LAPSES).fill(['requeued_shared', 'requeued_shared']));
    expect(kinds[MAX_FORGIVEN_LAPSES]).toEqual(['requeued', 'requeued']); // charged now: attempt 1 of 1
    expect(kinds[MAX_FORGIVEN_LAPSES + 1]).toEqual(['poisoned', 'poisoned']);
    for (const id of [a!.id, b!.id]) expect(await row(id)).toMatchObject({ status: 'failed', lapses_forgiven: MAX_FORGIVEN_LAPSES });
  });

  it('lapses of two different agents, one each, are not shared', async () => {
    const [a] = await runMany(1);
    const other = `${agent}-other`;
    await engine.agents.create(
      { name: other, max_parallel: 1, max_backlog: 5, lease_ttl_seconds: LEASE_MS / 1000, timeout_seconds: 600 },
      'test',
    );
    await engine.submit(other, { message: 'o' }, 't');
    const o = await claimOne('wo', other);
    clock.advance(LEASE_MS + 1);
    const reaped = (await engine.reapOnce()).filter((r) => r.id === a!.id || r.id === o.id).map((r) => r.kind);
    expect(reaped).toEqual(['requeued', 'requeued']);
    expect((await agentRow()).lapse_hold_at).toBeNull();
    expect((await agentRow(other)).lapse_hold_at).toBeNull();
  });

  it('the agent view and /metrics show the hold', async () => {
    await runMany(3);
    const metrics = createNodeMetrics(engine); // subscribes to the reaper's events from here
    try {
      clock.advance(LEASE_MS + 1);
      await reapMine();
      const listed = await engine.agents.get(agent);
      const view = agentView(listed.agent, listed);
      expect(view.lapse_hold).toEqual({ since: new Date(clock()).toISOString(), lapsed: 3 });
      expect(view.hold).toMatchObject({ reason: 'lapse_hold', until: null });
      expect(view.hold!.summary).toContain('3 leases lapsed together');
      const body = (await metrics.render()).body;
      expect(body).toContain(`baton_agent_lapse_hold{agent="${agent}"} 1`);
      expect(body).toMatch(/baton_reaper_actions_total\{kind="requeued_shared"\} [1-9]/);
    } finally {
      metrics.close();
    }
  });

  it(`a push agent holds for ${PUSH_LAPSE_HOLD_MS / 1000} s, then the next dispatch ends it and delivers`, async () => {
    const push = `${agent}-push`;
    await engine.agents.create(
      {
        name: push,
        max_parallel: 2,
        max_backlog: 5,
        lease_ttl_seconds: LEASE_MS / 1000,
        timeout_seconds: 600,
        delivery: 'push',
        push_url: 'http://127.0.0.1:9/',
      },
      'test',
    );
    for (const m of ['p1', 'p2']) await engine.submit(push, { message: m }, 't');
    const taken = await engine.claim(push, { owner: 'dispatcher:dead', max: 2, delivery: 'push' });
    expect(taken).toHaveLength(2);
    clock.advance(LEASE_MS + 1);
    expect((await engine.reapOnce()).filter((r) => r.agent === push).map((r) => r.kind)).toEqual(['requeued_shared', 'requeued_shared']);
    expect(await engine.claim(push, { owner: 'dispatcher:live', max: 2, delivery: 'push' })).toEqual([]);
    expect((await engine.getExecution(taken[0]!.id)).waiting?.reason).toBe('lapse_hold');
    clock.advance(PUSH_LAPSE_HOLD_MS);
    expect(await engine.claim(push, { owner: 'dispatcher:live', max: 2, delivery: 'push' })).toHaveLength(2);
    expect(JSON.parse((await audits('agent.lapse_hold_cleared', push))[0]!.detail!)).toMatchObject({ by: 'timeout', lapsed: 2 });
  });
});
