import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { diagnose } from '../../src/canary/catalogue.ts';
import { runCanaryOnce, type CycleReport } from '../../src/canary/run.ts';
import { newId } from '../../src/domain/ids.ts';
import { Engine } from '../../src/engine/engine.ts';
import { pruneAll } from '../../src/retention/prune.ts';
import type { ExecutionRow, NewExecution } from '../../src/store/schema.ts';
import { manualClock } from '../helpers/clock.ts';
import { historyWalks, observed, runningRow, writeRow } from '../helpers/canary.ts';
import { openTestStore, type TestStore } from '../helpers/store.ts';
import { agentMaker } from '../helpers/agents.ts';

// Composition's invariants, each twice: a violating state planted directly in the
// database fires with the right reason and diagnosis, and the same situation produced by the
// engine (subscriptions, groups) stays silent. Each test uses its own agents and subjects.

let ts: TestStore;
let engine: Engine;
const clock = manualClock(Date.UTC(2026, 5, 1));

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'canary-composition', backlogExpiryMs: 30 * 86_400_000 });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

const newAgent = agentMaker(() => engine, 'comp', { max_parallel: 5, max_backlog: 50, lease_ttl_seconds: 3600 });

const cycle = () => runCanaryOnce({ store: ts.store, clock });

function reasons(report: CycleReport, id: string, subject: string): string[] {
  const check = report.checks.find((c) => c.id === id);
  if (!check) throw new Error(`no check ${id}`);
  return check.findings.filter((f) => f.subject === subject).map((f) => f.reason);
}

/** A fresh cycle's findings of `id` about `subject`. */
const findings = async (id: string, subject: string) => reasons(await cycle(), id, subject);

const isOpen = async (id: string, subject: string) =>
  (await ts.store.db
    .selectFrom('canary_violations')
    .select('reason')
    .where('invariant', '=', id)
    .where('subject', '=', subject)
    .where('resolved_at', 'is', null)
    .executeTakeFirst()) !== undefined;

async function expectFires(id: string, subject: string, reason: string, component: RegExp) {
  expect(await findings(id, subject)).toEqual([reason]);
  expect(await isOpen(id, subject)).toBe(true);
  expect(diagnose(id, reason)).toMatch(component);
}

/** The composition checks' findings about `subjects` in a cycle (a healthy run leaves none). */
async function compositionFindings(subjects: Iterable<string>, report?: CycleReport) {
  const r = report ?? (await cycle());
  const mine = new Set(subjects);
  return r.checks
    .filter((c) => c.id.startsWith('C-'))
    .flatMap((c) => c.findings.filter((f) => mine.has(f.subject)).map((f) => `${c.id} ${f.subject} ${f.reason}`));
}

/** Every group and chained task of these agents (what a silent test produced through the engine). */
async function producedBy(agents: string[]): Promise<string[]> {
  const rows = await ts.store.db
    .selectFrom('executions')
    .select(['id', 'group_id', 'caused_by'])
    .where('agent', 'in', agents)
    .where((eb) => eb.or([eb('group_id', 'is not', null), eb('caused_by', 'is not', null)]))
    .execute();
  return [...new Set(rows.flatMap((r) => [r.group_id, r.caused_by === null ? null : r.id]).filter((x): x is string => x !== null))];
}

/** The composition findings about the groups and chained tasks of these agents. */
const findingsAbout = async (agents: string[], report?: CycleReport) => compositionFindings(await producedBy(agents), report);

/** Claim the agent's next task and end it. */
async function finish(agent: string, status: 'succeeded' | 'failed' | 'cancelled', result?: unknown): Promise<ExecutionRow> {
  clock.advance(1);
  const [row] = await engine.claim(agent, { owner: 'worker:test' });
  expect(row, `a task of ${agent} was admitted`).toBeDefined();
  const outcome = status === 'failed' ? { status, error: { code: 'boom', message: 'it broke' } } : { status, result };
  return engine.complete(row!.id, row!.lease_token!, outcome as never, 'worker:test');
}

// ── planting ────────────────────────────────────────────────────────────────

const ended = (now: number, status: 'succeeded' | 'failed' | 'cancelled' | 'skipped', extra: Partial<NewExecution> = {}) => ({
  status,
  attempt: status === 'skipped' ? 0 : 1,
  started_at: status === 'skipped' ? null : now,
  completed_at: now,
  duration_ms: status === 'skipped' ? null : 0,
  ...extra,
});

async function plantGroup(
  g: Partial<{
    status: 'running' | 'succeeded' | 'failed' | 'cancelled';
    size: number;
    join: string | null;
    join_execution_id: string | null;
    join_refused: string | null;
  }>,
) {
  const id = newId('gr_');
  const now = clock();
  const decided = (g.status ?? 'running') !== 'running';
  await ts.store.db
    .insertInto('execution_groups')
    .values({
      id,
      policy: 'all',
      quorum: null,
      size: g.size ?? 2,
      status: g.status ?? 'running',
      finished: 0,
      succeeded: 0,
      failed: 0,
      join_spec: g.join === undefined || g.join === null ? null : JSON.stringify({ agent: g.join, message: 'join' }),
      join_execution_id: g.join_execution_id ?? null,
      join_refused: g.join_refused ?? null,
      idempotency_key: null,
      created_at: now,
      created_by: 'test',
      decided_at: decided ? now : null,
    })
    .execute();
  return id;
}

const member = (group: string, index: number, agent: string, extra: Partial<NewExecution> = {}) =>
  writeRow(ts.store, clock(), { agent, trigger_kind: 'group', group_id: group, group_index: index, ...extra });
const joinRow = (group: string, agent: string, extra: Partial<NewExecution> = {}) =>
  writeRow(ts.store, clock(), {
    agent,
    trigger_kind: 'group',
    group_id: group,
    group_index: null,
    origin: JSON.stringify({ group: { id: group, role: 'join' } }),
    ...extra,
  });

/** A chained task as chains.ts writes it, with any part replaced. */
async function plantChained(
  source: ExecutionRow | string,
  target: string,
  o: {
    on?: string;
    filter?: Record<string, string>;
    subscription?: string;
    link?: 'self' | 'none' | string;
    extra?: Partial<NewExecution>;
  } = {},
) {
  const sourceId = typeof source === 'string' ? source : source.id;
  const subscription = o.subscription ?? newId('su_');
  const id = newId('ex_');
  const origin = {
    chain: {
      source_id: sourceId,
      subscription_id: subscription,
      on: o.on ?? 'succeeded',
      filter: o.filter ?? {},
      source_status: typeof source === 'string' ? 'succeeded' : source.status,
      source_agent: typeof source === 'string' ? 'gone' : source.agent,
    },
  };
  const link = o.link ?? 'self';
  if (link !== 'none') {
    await ts.store.db
      .insertInto('chain_links')
      .values({ source_id: sourceId, subscription_id: subscription, execution_id: link === 'self' ? id : link, refused: null, at: clock() })
      .execute();
  }
  return writeRow(ts.store, clock(), {
    id,
    agent: target,
    trigger_kind: 'chain',
    origin: JSON.stringify(origin),
    caused_by: sourceId,
    subscription_id: subscription,
    chain_depth: 1,
    ...o.extra,
  });
}

// ── C-01 ────────────────────────────────────────────────────────────────────

describe('C-01 a group is decided once its members are final, with exactly one join or a recorded reason', () => {
  it('fires on a second join of a decided group', async () => {
    const a = await newAgent();
    const g = await plantGroup({ status: 'succeeded', join: a });
    await member(g, 0, a, ended(clock(), 'succeeded'));
    await member(g, 1, a, ended(clock(), 'succeeded'));
    const first = await joinRow(g, a);
    await ts.store.db.updateTable('execution_groups').set({ join_execution_id: first.id }).where('id', '=', g).execute();
    expect(await findings('C-01', g)).toEqual([]);
    await joinRow(g, a);
    await expectFires('C-01', g, 'join_duplicated', /compare-and-set on execution_groups/);
  });

  it('fires on a join of a group still running', async () => {
    const a = await newAgent();
    const g = await plantGroup({ join: a });
    await member(g, 0, a);
    await member(g, 1, a, ended(clock(), 'succeeded'));
    expect(await findings('C-01', g)).toEqual([]);
    await joinRow(g, a);
    await expectFires('C-01', g, 'join_while_running', /without the decision/);
  });

  it('fires on a running group whose members are all final, and on one that lacks members', async () => {
    const a = await newAgent();
    const g = await plantGroup({ join: a });
    await member(g, 0, a, ended(clock(), 'succeeded'));
    // A failed member whose retry is queued is not final.
    const failed = await member(g, 1, a, ended(clock(), 'failed'));
    const retry = await member(g, 1, a, { retry_of: failed.id, retry_number: 1, trigger_kind: 'retry' });
    expect(await findings('C-01', g)).toEqual([]);
    await ts.store.db
      .updateTable('executions')
      .set({ ...ended(clock(), 'failed'), changed_at: clock(), changed_by: 'test' })
      .where('id', '=', retry.id)
      .execute();
    await expectFires('C-01', g, 'undecided', /memberFinal/);

    const short = await plantGroup({ size: 3 });
    await member(short, 0, a, ended(clock(), 'succeeded'));
    await member(short, 1, a, ended(clock(), 'succeeded'));
    await expectFires('C-01', short, 'members_missing', /group creation/);
  });

  it('a break behind the checkpoint: missed by a normal cycle, found by the full check walking the executions', async () => {
    const a = await newAgent();
    const g = await plantGroup({ status: 'succeeded', join: a });
    await member(g, 0, a, ended(clock(), 'succeeded'));
    const first = await joinRow(g, a);
    await ts.store.db.updateTable('execution_groups').set({ join_execution_id: first.id }).where('id', '=', g).execute();
    expect(await findings('C-01', g)).toEqual([]);
    // A writer bypassing the engine unnames the join: no event, so nothing after the checkpoint touches the group.
    await ts.store.db.updateTable('execution_groups').set({ join_execution_id: null }).where('id', '=', g).execute();
    expect(await findings('C-01', g)).toEqual([]);
    const full = await runCanaryOnce({ store: ts.store, clock, full: true });
    expect(reasons(full, 'C-01', g)).toEqual(['join_mismatch']);
    await ts.store.db.updateTable('execution_groups').set({ join_execution_id: first.id }).where('id', '=', g).execute();
  });

  it('fires on a decided group with a join spec and neither a join nor a refusal, a join it does not name, and a join without a spec', async () => {
    const a = await newAgent();
    const missing = await plantGroup({ status: 'failed', join: a });
    await member(missing, 0, a, ended(clock(), 'failed'));
    await member(missing, 1, a, ended(clock(), 'cancelled'));
    await expectFires('C-01', missing, 'join_missing', /neither|without creating or refusing/);
    // Recorded as refused: resolved on the next cycle's recheck (no new event about it).
    await ts.store.db.updateTable('execution_groups').set({ join_refused: 'backlog_full' }).where('id', '=', missing).execute();
    expect(await findings('C-01', missing)).toEqual([]);
    expect(await isOpen('C-01', missing)).toBe(false);

    const other = await plantGroup({ status: 'succeeded', join: a, join_execution_id: 'ex_someone_else' });
    await member(other, 0, a, ended(clock(), 'succeeded'));
    await joinRow(other, a);
    await expectFires('C-01', other, 'join_mismatch', /names/);

    const unasked = await plantGroup({ status: 'succeeded', join: null });
    await member(unasked, 0, a, ended(clock(), 'succeeded'));
    await joinRow(unasked, a);
    await expectFires('C-01', unasked, 'join_without_spec', /never asked for/);
  });

  it('watches running groups each cycle, not only those with new events', async () => {
    const a = await newAgent();
    const g = await plantGroup({ status: 'succeeded', join: null });
    await member(g, 0, a, ended(clock(), 'succeeded'));
    await member(g, 1, a, ended(clock(), 'succeeded'));
    expect(await findings('C-01', g)).toEqual([]);
    // A group row put back to running, with no event about any execution: the live part finds it.
    await ts.store.db.updateTable('execution_groups').set({ status: 'running', decided_at: null }).where('id', '=', g).execute();
    const r = await cycle();
    expect(r.events!.read).toBe(0);
    expect(reasons(r, 'C-01', g)).toEqual(['undecided']);
  });

  it('is silent for groups the engine ran: every policy, a member retried, a refused join, a cancelled group', async () => {
    const retrying = await newAgent({ retry_policy: { max_attempts: 2, base_seconds: 1, factor: 1, max_seconds: 1, jitter: 0 } });
    const w = await newAgent();
    const joiner = await newAgent();
    const tiny = await newAgent({ max_backlog: 1 });
    const agents = [retrying, w, joiner, tiny];

    // all: two members, one retried once and then succeeded; the join is created with the last.
    const all = await engine.groups.create(
      {
        members: [
          { agent: retrying, message: 'm0' },
          { agent: w, message: 'm1' },
        ],
        join: { agent: joiner, message: 'join {{group.id}}' },
      },
      'test',
    );
    await finish(retrying, 'failed');
    expect(await findingsAbout(agents)).toEqual([]); // a retry is queued: not final, not decided
    await finish(w, 'succeeded', { ok: 1 });
    clock.advance(1_001);
    await finish(retrying, 'succeeded', { ok: 0 });
    const decided = await ts.store.db.selectFrom('execution_groups').selectAll().where('id', '=', all.id).executeTakeFirstOrThrow();
    expect(decided.status).toBe('succeeded');
    expect(decided.join_execution_id).not.toBeNull();
    expect(await findingsAbout(agents)).toEqual([]);
    await finish(joiner, 'succeeded');

    // first_succeeded: the first success decides and cancels the rest (queued at once).
    const first = await engine.groups.create(
      {
        policy: 'first_succeeded',
        members: [
          { agent: w, message: 'a' },
          { agent: w, message: 'b' },
          { agent: w, message: 'c' },
        ],
        join: { agent: joiner, message: 'j' },
      },
      'test',
    );
    await finish(w, 'succeeded');
    expect(
      (await ts.store.db.selectFrom('execution_groups').select('status').where('id', '=', first.id).executeTakeFirstOrThrow()).status,
    ).toBe('succeeded');
    expect(await findingsAbout(agents)).toEqual([]);

    // quorum 2 of 3, no join.
    const quorum = await engine.groups.create(
      { policy: 'quorum', quorum: 2, members: [0, 1, 2].map((i) => ({ agent: w, message: `q${i}` })) },
      'test',
    );
    await finish(w, 'succeeded');
    await finish(w, 'failed');
    await finish(w, 'succeeded');
    expect(
      (await ts.store.db.selectFrom('execution_groups').select('status').where('id', '=', quorum.id).executeTakeFirstOrThrow()).status,
    ).toBe('succeeded');

    // all_succeeded whose join cannot be queued when it decides (the join agent's backlog filled
    // up meanwhile): refused and recorded.
    const refused = await engine.groups.create(
      {
        policy: 'all_succeeded',
        members: [
          { agent: w, message: 'x' },
          { agent: w, message: 'y' },
        ],
        join: { agent: tiny, message: 'j' },
      },
      'test',
    );
    await engine.submit(tiny, { message: 'fills the backlog' }, 'test');
    await finish(w, 'failed');
    const row = await ts.store.db.selectFrom('execution_groups').selectAll().where('id', '=', refused.id).executeTakeFirstOrThrow();
    expect([row.status, row.join_refused]).toEqual(['failed', 'backlog_full']);
    expect(await findingsAbout(agents)).toEqual([]);

    // A running group cancelled: members cancelled, the join never created (join_refused: cancelled).
    const cancelled = await engine.groups.create(
      {
        members: [
          { agent: w, message: 'c0' },
          { agent: w, message: 'c1' },
        ],
        join: { agent: joiner, message: 'j' },
      },
      'test',
    );
    await engine.groups.cancel(cancelled.id, 'test');
    expect(await findingsAbout(agents)).toEqual([]);
    // Drain what is left, and look once more.
    for (let i = 0; i < 10; i++) {
      const [row] = await engine.claim(w, { owner: 'worker:test' });
      if (!row) break;
      await engine.complete(row.id, row.lease_token!, { status: 'succeeded' }, 'worker:test');
    }
    expect(await findingsAbout(agents)).toEqual([]);
  });
});

// ── C-02 ────────────────────────────────────────────────────────────────────

describe("C-02 no chained task without its source's terminal event and its link", () => {
  it('fires on a chained task whose source is still running, and keeps firing after the source ends later', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    const now = clock();
    const source = await writeRow(ts.store, now, runningRow(now, a));
    const task = await plantChained(source, b);
    await expectFires('C-02', task.id, 'source_not_final', /outside the completing transaction/);
    clock.advance(5);
    await ts.store.db
      .updateTable('executions')
      .set({
        ...ended(clock(), 'succeeded'),
        lease_token: null,
        lease_owner: null,
        lease_expires_at: null,
        changed_at: clock(),
        changed_by: 'test',
      })
      .where('id', '=', source.id)
      .execute();
    expect(await findings('C-02', task.id)).toEqual(['source_not_final']);
  });

  it('fires on a chained task without its chain_links row, or whose row names another execution', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    const source = await writeRow(ts.store, clock(), { agent: a, ...ended(clock(), 'succeeded') });
    const unlinked = await plantChained(source, b, { link: 'none' });
    await expectFires('C-02', unlinked.id, 'link_missing', /exactly-once link/);
    const elsewhere = await plantChained(source, b, { link: 'ex_another' });
    await expectFires('C-02', elsewhere.id, 'link_elsewhere', /two tasks/);
  });

  it('fires on a source deleted without its link; a source pruned with its link is not judged', async () => {
    const b = await newAgent();
    const orphan = await plantChained('ex_deleted_source', b);
    await expectFires('C-02', orphan.id, 'source_missing', /pruner/);
    const pruned = await plantChained('ex_pruned_source', b, { link: 'none' });
    const r = await cycle();
    expect(reasons(r, 'C-02', pruned.id)).toEqual([]);
    expect(reasons(r, 'C-03', pruned.id)).toEqual([]);
  });

  it('is silent for tasks chained by the engine: succeeded, failed after retries, cancelled while queued, a chain of two', async () => {
    const flaky = await newAgent({ retry_policy: { max_attempts: 2, base_seconds: 1, factor: 1, max_seconds: 1, jitter: 0 } });
    const [b, c] = [await newAgent(), await newAgent()];
    const agents = [flaky, b, c];
    await engine.subscriptions.create(
      { source_agent: flaky, target_agent: b, on: 'any', message: 'after {{source.id}} {{source.status}}' },
      'test',
    );
    await engine.subscriptions.create(
      { source_agent: b, target_agent: c, on: 'succeeded', message: 'review {{source.result#/title}}' },
      'test',
    );
    expect(await findingsAbout(agents)).toEqual([]);
    await engine.submit(flaky, { message: 'one' }, 'test');
    await finish(flaky, 'succeeded');
    await finish(b, 'succeeded', { title: 'done' }); // chains again onto c
    await engine.submit(flaky, { message: 'two' }, 'test');
    await finish(flaky, 'failed');
    clock.advance(1_001);
    await finish(flaky, 'failed');
    const queued = await engine.submit(flaky, { message: 'three' }, 'test');
    await engine.cancel(queued.id, 'test');
    const chained = await ts.store.db
      .selectFrom('executions')
      .select(['id', 'agent'])
      .where('caused_by', 'is not', null)
      .where('agent', 'in', [b, c])
      .execute();
    expect(chained).toHaveLength(4);
    expect(await findingsAbout(agents)).toEqual([]);
    // The full check over all history agrees (it finds only what earlier tests planted).
    expect(await findingsAbout(agents, await runCanaryOnce({ store: ts.store, clock, full: true }))).toEqual([]);
  });
});

// ── C-03 ────────────────────────────────────────────────────────────────────

describe('C-03 no subscription created a task for a non-matching outcome, nor twice', () => {
  it("fires on a task whose recorded `on` does not match its source's status", async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    const source = await writeRow(ts.store, clock(), { agent: a, ...ended(clock(), 'succeeded') });
    const wrong = await plantChained(source, b, { on: 'failed' });
    await expectFires('C-03', wrong.id, 'status_mismatch', /match in engine\/composition\/chains.ts/);
    const anyOk = await plantChained(source, b, { on: 'any' });
    expect(await findings('C-03', anyOk.id)).toEqual([]);
    // `any` never covers a skipped start.
    const skipped = await writeRow(ts.store, clock(), { agent: a, ...ended(clock(), 'skipped') });
    const fromSkip = await plantChained(skipped, b, { on: 'any' });
    await expectFires('C-03', fromSkip.id, 'status_mismatch', /`on`/);
  });

  it('fires on a task outside its recorded filter (schedule, trigger kind of the first run)', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    const manual = await writeRow(ts.store, clock(), { agent: a, trigger_kind: 'manual', ...ended(clock(), 'succeeded') });
    const bySchedule = await plantChained(manual, b, { filter: { schedule_id: 'sc_other' } });
    await expectFires('C-03', bySchedule.id, 'filter_mismatch', /filter/);
    const byTrigger = await plantChained(manual, b, { filter: { trigger: 'webhook' } });
    await expectFires('C-03', byTrigger.id, 'filter_mismatch', /filter/);
    const matching = await plantChained(manual, b, { filter: { trigger: 'manual' } });
    expect(await findings('C-03', matching.id)).toEqual([]);
    // A retry's trigger kind is its first run's.
    const retried = await writeRow(ts.store, clock(), {
      agent: a,
      trigger_kind: 'retry',
      origin: JSON.stringify({ retry_of: manual.id, retry_root: manual.id, first_trigger: 'manual' }),
      ...ended(clock(), 'succeeded'),
    });
    const fromRetry = await plantChained(retried, b, { filter: { trigger: 'manual' } });
    expect(await findings('C-03', fromRetry.id)).toEqual([]);
  });

  it('fires on a task chained from a failure that was retried (not final)', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    const failed = await writeRow(ts.store, clock(), { agent: a, ...ended(clock(), 'failed') });
    await writeRow(ts.store, clock(), { agent: a, trigger_kind: 'retry', retry_of: failed.id, retry_number: 1, retry_root: failed.id });
    const early = await plantChained(failed, b, { on: 'failed' });
    await expectFires('C-03', early.id, 'source_retried', /only final outcomes chain/);
  });

  it('fires on a second task for the same source and subscription, and on an origin that is missing or names another source', async () => {
    const [a, b] = [await newAgent(), await newAgent()];
    const source = await writeRow(ts.store, clock(), { agent: a, ...ended(clock(), 'succeeded') });
    const once = await plantChained(source, b);
    expect(await findings('C-03', once.id)).toEqual([]);
    const twice = await plantChained(source, b, { subscription: once.subscription_id!, link: 'none' });
    const r = await cycle();
    expect(reasons(r, 'C-03', twice.id)).toEqual(['duplicate_chain']);
    expect(reasons(r, 'C-03', once.id)).toEqual(['duplicate_chain']);
    expect(diagnose('C-03', 'duplicate_chain')).toMatch(/exactly once/);

    const bare = await plantChained(source, b, { extra: { origin: '{"key":"k_1"}' } });
    await expectFires('C-03', bare.id, 'origin_missing', /origin/);
    const crossed = await plantChained(source, b, {
      extra: { origin: JSON.stringify({ chain: { source_id: 'ex_else', subscription_id: 'su_else', on: 'succeeded', filter: {} } }) },
    });
    await expectFires('C-03', crossed.id, 'origin_mismatch', /another source/);
  });

  it('is silent for filters and statuses the engine matched, including a retried scheduled run', async () => {
    const a = await newAgent({ retry_policy: { max_attempts: 2, base_seconds: 1, factor: 1, max_seconds: 1, jitter: 0 } });
    const b = await newAgent();
    const s1 = await engine.schedules.create(a, { name: 's1', cron: '0 0 1 1 *', message: 'tick' }, 'test');
    await engine.subscriptions.create(
      { source_agent: a, target_agent: b, on: 'failed', filter: { schedule_id: s1.id }, message: 'x' },
      'test',
    );
    await engine.subscriptions.create({ source_agent: a, target_agent: b, on: 'any', filter: { trigger: 'manual' }, message: 'y' }, 'test');
    await engine.subscriptions.create({ source_agent: a, target_agent: b, on: 'cancelled', message: 'z' }, 'test');
    await engine.schedules.trigger(s1.id, { actor: 'test', trigger: 'manual', origin: {} });
    await finish(a, 'failed');
    clock.advance(1_001);
    const last = await finish(a, 'failed');
    expect(last.trigger_kind).toBe('retry');
    await engine.submit(a, { message: 'api' }, 'test');
    await finish(a, 'cancelled');
    const tasks = await ts.store.db.selectFrom('executions').select('id').where('agent', '=', b).execute();
    expect(tasks).toHaveLength(3);
    const r = await cycle();
    for (const t of tasks) {
      expect(reasons(r, 'C-02', t.id)).toEqual([]);
      expect(reasons(r, 'C-03', t.id)).toEqual([]);
    }
    // Later, a person retries the failed run that chained: its chained task was still made for a
    // final outcome (the full check judges every chained task again).
    clock.advance(60_000);
    await engine.retryFailed(last.id, 'test');
    const full = await runCanaryOnce({ store: ts.store, clock, full: true });
    for (const t of tasks) expect(reasons(full, 'C-03', t.id)).toEqual([]);
  });
});

// ── cost ────────────────────────────────────────────────────────────────────

describe('what the composition checks read', () => {
  it('every query seeks an index made for its shape (EXPLAIN, sequential scans off on PostgreSQL)', async () => {
    const o = observed(ts.store);
    const [a, b] = [await newAgent(), await newAgent()];
    await engine.subscriptions.create({ source_agent: a, target_agent: b, on: 'succeeded', message: 'x' }, 'test');
    await engine.groups.create(
      {
        members: [
          { agent: a, message: 'g0' },
          { agent: b, message: 'g1' },
        ],
        join: { agent: b, message: 'j' },
      },
      'test',
    );
    const g2 = await engine.groups.create({ members: [{ agent: b, message: 'h0' }] }, 'test');
    await finish(a, 'succeeded'); // member 0 ends, and chains onto b
    // An open violation of each, rechecked next cycle.
    const src = await writeRow(ts.store, clock(), { agent: a, ...ended(clock(), 'succeeded') });
    await plantChained(src, b, { on: 'failed', link: 'none' });
    const broken = await plantGroup({ status: 'failed', join: a });
    await member(broken, 0, a, ended(clock(), 'failed'));
    await runCanaryOnce({ store: o.store, clock });
    expect(await isOpen('C-01', broken)).toBe(true);
    await finish(b, 'succeeded');
    o.reset();
    await runCanaryOnce({ store: o.store, clock });
    const shapes = [
      /from "execution_groups" where "status" = 'running'/, // live: running groups
      /"status" in \('queued', 'running'\)/, // their live members (executions_group_open)
      /"group_index" is null/, // joins
      /left join "chain_links"/, // chained tasks with source and link
      /from "execution_events" where "execution_id" in/, // the sources' terminal events
      /where "retry_of" in/, // retried sources
      /where "caused_by" in/, // tasks per source and subscription
    ];
    for (const shape of shapes)
      expect(
        o.queries.some((q) => shape.test(q.sql)),
        String(shape),
      ).toBe(true);
    if (process.env.BATON_SHOW_PLANS) for (const q of o.queries) console.log(q.sql);
    expect(await historyWalks(ts.store, o.queries)).toEqual([]);
    expect(g2.id).toBeTruthy();
    // Fix what was planted, so later cycles in this file see only what they plant.
    await sql`UPDATE execution_groups SET join_refused = 'agent_missing' WHERE id = ${broken}`.execute(ts.store.db);
  });
});

// ── pruning ─────────────────────────────────────────────────────────────────

describe('after the pruner', () => {
  it('a chained task outliving its source, a join outliving its group and a running group with old members are not findings', async () => {
    const [a, b, m, j, slow] = [await newAgent(), await newAgent(), await newAgent(), await newAgent(), await newAgent()];
    await engine.subscriptions.create({ source_agent: a, target_agent: b, on: 'succeeded', message: 'after {{source.id}}' }, 'test');
    await engine.submit(a, { message: 'source' }, 'test');
    const source = await finish(a, 'succeeded');
    const task = await ts.store.db.selectFrom('executions').selectAll().where('caused_by', '=', source.id).executeTakeFirstOrThrow();
    const decided = await engine.groups.create({ members: [{ agent: m, message: 'm0' }], join: { agent: j, message: 'join' } }, 'test');
    await finish(m, 'succeeded');
    const group = await ts.store.db.selectFrom('execution_groups').selectAll().where('id', '=', decided.id).executeTakeFirstOrThrow();
    expect(group.join_execution_id).not.toBeNull();
    const running = await engine.groups.create(
      {
        members: [
          { agent: m, message: 'r0' },
          { agent: slow, message: 'r1' },
        ],
      },
      'test',
    );
    const early = await finish(m, 'succeeded');
    await cycle();

    // Two days later, with one day of retention: the source (with its link), the decided group
    // and its finished member go; the queued task, the queued join, and the running group's
    // finished member stay.
    clock.advance(2 * 86_400_000);
    await pruneAll({ store: ts.store, settings: { retentionDays: 1, auditRetentionDays: 0 }, now: clock() });
    const exists = async (id: string) =>
      (await ts.store.db.selectFrom('executions').select('id').where('id', '=', id).executeTakeFirst()) !== undefined;
    expect(await exists(source.id)).toBe(false);
    expect(await ts.store.db.selectFrom('chain_links').select('source_id').where('source_id', '=', source.id).execute()).toEqual([]);
    expect(await ts.store.db.selectFrom('execution_groups').select('id').where('id', '=', decided.id).executeTakeFirst()).toBeUndefined();
    expect([await exists(task.id), await exists(group.join_execution_id!), await exists(early.id)]).toEqual([true, true, true]);

    // Their next events make them activity again; nothing is left to compare, so nothing fires.
    await finish(b, 'succeeded');
    await finish(j, 'succeeded');
    await finish(slow, 'succeeded'); // the running group's last member: it decides now
    const r = await cycle();
    for (const subject of [task.id, decided.id, group.join_execution_id!, running.id])
      for (const id of ['C-01', 'C-02', 'C-03']) expect(reasons(r, id, subject), `${id} ${subject}`).toEqual([]);
    expect(
      (await ts.store.db.selectFrom('execution_groups').select('status').where('id', '=', running.id).executeTakeFirstOrThrow()).status,
    ).toBe('succeeded');
  });
});
