import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { tickSchedulesOnce } from '../../src/engine/triggers/scheduler.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock(Date.UTC(2026, 1, 1));
let n = 0;
let agent: string;
const policy = { max_attempts: 3, base_seconds: 10, factor: 2, max_seconds: 15, jitter: 0 };

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'retry-test', cancelGraceMs: 30_000, backlogExpiryMs: 86_400_000 });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});
beforeEach(async () => {
  agent = `agent-${++n}`;
  await engine.agents.create({ name: agent, max_parallel: 1, max_backlog: 10, timeout_seconds: 60, retry_policy: policy }, 'test');
});

async function failNext(code = 'boom') {
  const [row] = await engine.claim(agent, { owner: 'w' });
  expect(row).toBeDefined();
  return engine.complete(row!.id, row!.lease_token!, { status: 'failed', error: { code, message: 'it broke' } }, 'worker');
}
const retryOf = (id: string) => ts.store.db.selectFrom('executions').selectAll().where('retry_of', '=', id).executeTakeFirst();

describe('retries', () => {
  it('a failure with attempts left creates the retry in the same transaction, with backoff; the chain is visible from any member', async () => {
    const first = await engine.submit(agent, { message: 'flaky' }, 'test');
    const f1 = await failNext();
    expect(f1.status).toBe('failed');
    const r1 = await retryOf(first.id);
    expect(r1).toMatchObject({
      status: 'queued',
      trigger_kind: 'retry',
      retry_number: 1,
      retry_root: first.id,
      message: 'flaky',
      run_after: clock() + 10_000,
    });
    expect(JSON.parse(r1!.origin)).toMatchObject({ retry_of: first.id, first_trigger: 'api' });
    // Not admitted before its run_after.
    expect(await engine.claim(agent, { owner: 'w' })).toEqual([]);
    clock.advance(10_001);
    await failNext();
    const r2 = await retryOf(r1!.id);
    expect(r2).toMatchObject({ retry_number: 2, retry_root: first.id, run_after: clock() + 15_000 }); // 20 s capped at max 15 s
    clock.advance(15_001);
    await failNext();
    expect(await retryOf(r2!.id)).toBeUndefined(); // 3 attempts used
    for (const id of [first.id, r1!.id, r2!.id]) {
      expect((await engine.getExecution(id)).chain).toEqual([first.id, r1!.id, r2!.id]);
    }
    const audit = await ts.store.db
      .selectFrom('audit_log')
      .select(['action', 'execution_id'])
      .where('action', '=', 'execution.retry')
      .where('subject', '=', agent)
      .execute();
    expect(audit.map((a) => a.execution_id).sort()).toEqual([r1!.id, r2!.id].sort());
  });

  it('success, cancellation and skipped rows are never retried; a per-task policy overrides the agent', async () => {
    const ok = await engine.submit(agent, { message: 'fine' }, 'test');
    const [row] = await engine.claim(agent, { owner: 'w' });
    await engine.complete(row!.id, row!.lease_token!, { status: 'succeeded' }, 'w');
    expect(await retryOf(ok.id)).toBeUndefined();
    const c = await engine.submit(agent, { message: 'cancel me' }, 'test');
    const [crow] = await engine.claim(agent, { owner: 'w' });
    await engine.complete(crow!.id, crow!.lease_token!, { status: 'cancelled' }, 'w');
    expect(await retryOf(c.id)).toBeUndefined();
    const once = await engine.submit(
      agent,
      { message: 'no retries', retry: { max_attempts: 1, base_seconds: 1, factor: 1, max_seconds: 1, jitter: 0 } },
      'test',
    );
    await failNext();
    expect(await retryOf(once.id)).toBeUndefined();
  });

  it("the reaper's timeout failure creates the retry with it", async () => {
    const first = await engine.submit(agent, { message: 'hangs' }, 'test');
    await engine.claim(agent, { owner: 'w' });
    clock.advance(61_000); // past the 60 s timeout
    const reaped = await engine.reapOnce();
    const mine = reaped.find((r) => r.id === first.id);
    expect(mine).toMatchObject({ kind: 'timed_out', to: 'failed' });
    const retry = await retryOf(first.id);
    expect(retry).toMatchObject({ status: 'queued', trigger_kind: 'retry' });
    expect(mine!.retry_id).toBe(retry!.id);
  });

  it("a schedule's retry policy overrides the agent's", async () => {
    clock.set(Date.UTC(2026, 1, 2, 0, 0, 10));
    const s = await engine.schedules.create(
      agent,
      {
        name: 'r',
        cron: '* * * * *',
        message: 'sched',
        retry_policy: { max_attempts: 2, base_seconds: 1, factor: 1, max_seconds: 1, jitter: 0 },
      },
      'test',
    );
    clock.set(Date.UTC(2026, 1, 2, 0, 1, 0, 10));
    const [fired] = (await tickSchedulesOnce(engine)).filter((f) => f.schedule_id === s.id);
    await failNext();
    const retry = await retryOf(fired!.execution_id);
    expect(retry).toMatchObject({ schedule_id: s.id, scheduled_for: null, run_after: clock() + 1000, retry_number: 1 });
    clock.advance(1001);
    await failNext();
    expect(await retryOf(retry!.id)).toBeUndefined();
    await engine.schedules.update(s.id, { enabled: false }, 'test');
  });
});
