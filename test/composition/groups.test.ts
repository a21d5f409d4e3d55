import type { FastifyInstance, InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildServer } from '../../src/api/server.ts';
import { KeyStore } from '../../src/auth/keys.ts';
import { BatonError } from '../../src/domain/errors.ts';
import { decideGroup, GROUP_LIMITS } from '../../src/domain/groups.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { GroupInput } from '../../src/engine/composition/group-service.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { pruneAll } from '../../src/retention/prune.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { agentMaker } from '../helpers/agents.ts';

// Groups (fan-out with a join): on the manual clock, on both stores.

let ts: TestStore;
let engine: Engine;
let app: FastifyInstance;
let admin: string;
const clock = manualClock();
let n = 0;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({
    store: ts.store,
    clock,
    nodeId: 'groups-test',
    backlogExpiryMs: 30 * 86_400_000,
    alertSinks: ['webhook', 'slack'],
  });
  const keys = new KeyStore(ts.store);
  admin = (await keys.create({ name: 'admin', scope: 'admin' }, 'test')).key;
  app = await buildServer({ engine, keys, logger: false });
});
afterAll(async () => {
  await app.close();
  engine.close();
  await ts.cleanup();
});

const newAgent = agentMaker(() => engine, 'grp', { max_parallel: 10, max_backlog: 100, breaker: null });
const create = (input: GroupInput) => engine.groups.create(input, 'key:test');
const tasks = (agent: string, k: number) =>
  Array.from({ length: k }, (_, i) => ({ agent, message: `task ${i}`, payload: { i }, priority: i }));

/** Claim the member at `index` of the group (it must be queued on its agent) and end it. */
async function finish(groupId: string, index: number, status: 'succeeded' | 'failed' | 'cancelled', result?: unknown) {
  const row = await claimMember(groupId, index);
  clock.advance(10);
  return engine.complete(
    row.id,
    row.lease_token!,
    status === 'failed' ? { status, error: { code: 'boom', message: `member ${index} broke` } } : { status, result },
    'w1',
  );
}
/** Lease tokens of rows the test claimed: claiming a member may admit others of its agent first (they stay running). */
const leases = new Map<string, string>();
/** The member at `index` running under a lease this test holds. Members are admitted in index order (tasks() sets priorities), one a claim. */
async function claimMember(groupId: string, index: number): Promise<ExecutionRow> {
  const target = await latest(groupId, index);
  for (let i = 0; i < 20 && target.status === 'queued'; i++) {
    const [row] = await engine.claim(target.agent, { owner: 'w1' });
    if (!row) break;
    leases.set(row.id, row.lease_token!);
    if (row.id === target.id) break;
  }
  const row = await latest(groupId, index);
  expect(row.status, `member ${index} is running`).toBe('running');
  expect(leases.has(row.id)).toBe(true);
  return { ...row, lease_token: leases.get(row.id)! };
}
const latest = async (groupId: string, index: number) =>
  ts.store.db
    .selectFrom('executions')
    .selectAll()
    .where('group_id', '=', groupId)
    .where('group_index', '=', index)
    .orderBy('retry_number', 'desc')
    .executeTakeFirstOrThrow();
const groupRow = (id: string) => ts.store.db.selectFrom('execution_groups').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
const joins = (id: string) =>
  ts.store.db.selectFrom('executions').selectAll().where('group_id', '=', id).where('group_index', 'is', null).execute();

describe('decideGroup (pure)', () => {
  it('decides each policy at the first moment its outcome is certain', () => {
    expect(decideGroup('all', null, { size: 3, finished: 2, succeeded: 2 })).toBeUndefined();
    expect(decideGroup('all', null, { size: 3, finished: 3, succeeded: 3 })).toBe('succeeded');
    expect(decideGroup('all', null, { size: 3, finished: 3, succeeded: 2 })).toBe('failed');
    expect(decideGroup('all_succeeded', null, { size: 3, finished: 1, succeeded: 0 })).toBe('failed');
    expect(decideGroup('all_succeeded', null, { size: 3, finished: 2, succeeded: 2 })).toBeUndefined();
    expect(decideGroup('first_succeeded', null, { size: 3, finished: 1, succeeded: 1 })).toBe('succeeded');
    expect(decideGroup('first_succeeded', null, { size: 3, finished: 2, succeeded: 0 })).toBeUndefined();
    expect(decideGroup('first_succeeded', null, { size: 3, finished: 3, succeeded: 0 })).toBe('failed');
    expect(decideGroup('quorum', 2, { size: 4, finished: 2, succeeded: 2 })).toBe('succeeded');
    expect(decideGroup('quorum', 2, { size: 4, finished: 2, succeeded: 0 })).toBeUndefined();
    expect(decideGroup('quorum', 2, { size: 4, finished: 3, succeeded: 0 })).toBe('failed');
  });
});

describe(`groups in the engine (${STORE_KIND})`, () => {
  it('all: the join is created once, when the last member ends, with every outcome in order', async () => {
    const a = await newAgent();
    const b = await newAgent();
    const j = await newAgent();
    const g = await create({
      members: [...tasks(a, 2), { agent: b, message: 'other' }],
      join: {
        agent: j,
        message: 'group {{group.id}} {{group.status}}: first said {{members.0.result#/answer}}, third: {{members.2.error.message}}',
      },
    });
    expect(g).toMatchObject({ status: 'running', size: 3, policy: 'all', paused_agents: [], join: { agent: j, execution_id: null } });
    expect(g.members.map((m) => [m.index, m.agent, m.status])).toEqual([
      [0, a, 'queued'],
      [1, a, 'queued'],
      [2, b, 'queued'],
    ]);
    const member = await latest(g.id, 1);
    expect({ trigger: member.trigger_kind, origin: JSON.parse(member.origin) }).toEqual({
      trigger: 'group',
      origin: { group: { id: g.id, role: 'member', index: 1 } },
    });

    await finish(g.id, 0, 'succeeded', { answer: 42 });
    await finish(g.id, 2, 'failed');
    expect(await joins(g.id)).toHaveLength(0);
    expect(await groupRow(g.id)).toMatchObject({ status: 'running', finished: 2, succeeded: 1, failed: 1 });
    await finish(g.id, 1, 'succeeded', 'plain');

    const group = await groupRow(g.id);
    expect(group).toMatchObject({ status: 'failed', finished: 3, succeeded: 2, failed: 1, decided_at: clock() });
    const [join, ...more] = await joins(g.id);
    expect(more).toHaveLength(0);
    expect(group.join_execution_id).toBe(join!.id);
    expect(join).toMatchObject({ agent: j, status: 'queued', trigger_kind: 'group', group_index: null });
    expect(JSON.parse(join!.origin)).toEqual({ group: { id: g.id, role: 'join' } });
    expect(join!.message).toBe(`group ${g.id} failed: first said 42, third: member 2 broke`);
    const payload = JSON.parse(join!.payload);
    expect(payload.group).toEqual({ id: g.id, policy: 'all', status: 'failed' });
    expect(payload.members).toEqual([
      { index: 0, agent: a, execution_id: g.members[0]!.execution_id, status: 'succeeded', result: { answer: 42 }, error: null },
      { index: 1, agent: a, execution_id: g.members[1]!.execution_id, status: 'succeeded', result: 'plain', error: null },
      {
        index: 2,
        agent: b,
        execution_id: g.members[2]!.execution_id,
        status: 'failed',
        result: null,
        error: { code: 'boom', message: 'member 2 broke' },
      },
    ]);

    const view = await engine.groups.get(g.id);
    expect(view).toMatchObject({
      status: 'failed',
      progress: { finished: 3, succeeded: 2, failed: 1 },
      join: { agent: j, execution_id: join!.id, status: 'queued' },
    });
    expect(view.members.map((m) => m.result_preview)).toEqual(['{"answer":42}', '"plain"', null]);
  });

  it('all_succeeded: the first failure decides; queued members are cancelled, running ones asked to stop, and no second join', async () => {
    const a = await newAgent();
    const j = await newAgent();
    const g = await create({ members: tasks(a, 4), policy: 'all_succeeded', join: { agent: j, message: 'done: {{group.status}}' } });
    await finish(g.id, 0, 'succeeded', 1);
    const running = await claimMember(g.id, 1); // stays running
    await finish(g.id, 2, 'failed');
    expect(await groupRow(g.id)).toMatchObject({ status: 'failed' });
    expect(await latest(g.id, 3)).toMatchObject({ status: 'cancelled', error_code: 'group_decided' });
    expect((await latest(g.id, 1)).cancel_requested_at).toBe(clock());
    // The queued member the decision cancelled was counted too.
    expect(await groupRow(g.id)).toMatchObject({ finished: 3, succeeded: 1, failed: 1 });
    const [join] = await joins(g.id);
    expect(JSON.parse(join!.payload).members.map((m: any) => m.status)).toEqual(['succeeded', 'running', 'failed', 'cancelled']);
    // The running member stops later: counted, no second join.
    await engine.complete(running.id, running.lease_token!, { status: 'cancelled' }, 'w1');
    expect(await groupRow(g.id)).toMatchObject({ status: 'failed', finished: 4 });
    expect(await joins(g.id)).toHaveLength(1);
  });

  it('first_succeeded: the first success decides and cancels the rest', async () => {
    const a = await newAgent();
    const g = await create({ members: tasks(a, 3), policy: 'first_succeeded' });
    await finish(g.id, 0, 'failed');
    expect((await groupRow(g.id)).status).toBe('running');
    await finish(g.id, 1, 'succeeded', 'won');
    expect(await groupRow(g.id)).toMatchObject({ status: 'succeeded', finished: 3, succeeded: 1, failed: 1, join_execution_id: null });
    expect(await latest(g.id, 2)).toMatchObject({ status: 'cancelled', error_code: 'group_decided' });
  });

  it('first_succeeded without any success fails when every member has ended', async () => {
    const a = await newAgent();
    const g = await create({ members: tasks(a, 2), policy: 'first_succeeded' });
    await finish(g.id, 0, 'failed');
    await finish(g.id, 1, 'cancelled');
    expect(await groupRow(g.id)).toMatchObject({ status: 'failed', finished: 2, succeeded: 0, failed: 1 });
  });

  it('quorum k: k successes decide; k out of reach fails at once', async () => {
    const a = await newAgent();
    const j = await newAgent();
    const won = await create({
      members: tasks(a, 4),
      policy: 'quorum',
      quorum: 2,
      join: { agent: j, message: '{{group.succeeded}} of {{group.size}}' },
    });
    await finish(won.id, 0, 'succeeded', 'x');
    await finish(won.id, 1, 'failed');
    expect((await groupRow(won.id)).status).toBe('running');
    await finish(won.id, 2, 'succeeded', 'y');
    expect((await groupRow(won.id)).status).toBe('succeeded');
    expect(await latest(won.id, 3)).toMatchObject({ status: 'cancelled', error_code: 'group_decided' });
    expect((await joins(won.id))[0]!.message).toBe('2 of 4');

    const lost = await create({ members: tasks(a, 4), policy: 'quorum', quorum: 3 });
    await finish(lost.id, 0, 'failed');
    expect((await groupRow(lost.id)).status).toBe('running');
    await finish(lost.id, 1, 'failed'); // 2 left, 3 needed
    expect(await groupRow(lost.id)).toMatchObject({ status: 'failed', finished: 4 });
  });

  it('a member with a retry policy counts only when its last retry ends; the join gets that retry', async () => {
    const a = await newAgent({ retry_policy: { max_attempts: 2, base_seconds: 1, factor: 1, max_seconds: 1, jitter: 0 } });
    const j = await newAgent();
    const g = await create({ members: tasks(a, 2), join: { agent: j, message: 'joined' } });
    await finish(g.id, 0, 'failed'); // retried
    expect(await groupRow(g.id)).toMatchObject({ finished: 0, status: 'running' });
    const retry = await latest(g.id, 0);
    expect(retry).toMatchObject({ retry_number: 1, status: 'queued', group_index: 0 });
    await finish(g.id, 1, 'succeeded', 'b');
    clock.advance(2000);
    await finish(g.id, 0, 'succeeded', 'second try');
    expect(await groupRow(g.id)).toMatchObject({ status: 'succeeded', finished: 2, succeeded: 2, failed: 0 });
    const members = JSON.parse((await joins(g.id))[0]!.payload).members;
    expect(members[0]).toMatchObject({ execution_id: retry.id, status: 'succeeded', result: 'second try' });
    expect((await engine.groups.get(g.id)).members[0]).toMatchObject({ execution_id: retry.id, retry_number: 1 });
  });

  it("the join carries members' results as stored, up to the budget; its message reads them parsed", async () => {
    const a = await newAgent();
    const j = await newAgent();
    const g = await create({
      members: tasks(a, 3),
      join: { agent: j, message: 'first: {{members.0.result#/title}} / {{members.1.result.n}}' },
    });
    const first = { title: 'Fix "it" \\ ü 😀', rows: Array.from({ length: 3000 }, (_, i) => ({ i, s: `\t${i}` })) };
    await finish(g.id, 0, 'succeeded', first);
    await finish(g.id, 1, 'succeeded', { n: [1, null] });
    // Past what is left of the budget: omitted, read by execution id.
    await finish(g.id, 2, 'succeeded', 'z'.repeat(GROUP_LIMITS.joinResultsMaxChars));
    const [join] = await joins(g.id);
    expect(join!.message).toBe('first: Fix "it" \\ ü 😀 / [1,null]');
    const payload = JSON.parse(join!.payload);
    expect(payload.members.map((m: any) => Object.keys(m))).toEqual([
      ['index', 'agent', 'execution_id', 'status', 'result', 'error'],
      ['index', 'agent', 'execution_id', 'status', 'result', 'error'],
      ['index', 'agent', 'execution_id', 'status', 'result', 'result_omitted', 'error'],
    ]);
    expect(payload.members[0].result).toEqual(first);
    expect(payload.members[1].result).toEqual({ n: [1, null] });
    expect(payload.members[2]).toMatchObject({ result: null, result_omitted: true });
  });

  it('a full join backlog leaves join_refused and an alert, and never fails the member', async () => {
    const a = await newAgent();
    const j = await newAgent({ max_backlog: 1 });
    await engine.submit(j, { message: 'fills the backlog' }, 'test');
    const g = await create({ members: tasks(a, 1), join: { agent: j, message: 'joined' } });
    const done = await finish(g.id, 0, 'succeeded', 1);
    expect(done.status).toBe('succeeded');
    expect(await groupRow(g.id)).toMatchObject({ status: 'succeeded', join_execution_id: null, join_refused: 'backlog_full' });
    expect(await joins(g.id)).toHaveLength(0);
    const alerts = await ts.store.db
      .selectFrom('canary_alerts')
      .select(['sink', 'body'])
      .where('invariant', '=', 'group.join_refused')
      .where('body', 'like', `%${g.id}%`)
      .orderBy('sink')
      .execute();
    expect(alerts.map((r) => r.sink)).toEqual(['slack', 'webhook']);
    expect(JSON.parse(alerts[1]!.body)).toMatchObject({ event: 'group.join_refused', group_id: g.id, agent: j, reason: 'backlog_full' });
  });

  it('a deleted join agent leaves join_refused agent_missing', async () => {
    const a = await newAgent();
    const j = await newAgent();
    const g = await create({ members: tasks(a, 1), join: { agent: j, message: 'joined' } });
    await engine.agents.delete(j, 'test');
    await finish(g.id, 0, 'succeeded');
    expect(await groupRow(g.id)).toMatchObject({ status: 'succeeded', join_refused: 'agent_missing' });
  });

  it('deleting the agent of the members and the join decides the group without starting the join on it', async () => {
    // Cancelling the deleted agent's queued member decided the group inside the delete, and the join was created on the agent
    // being deleted: a queued task for an agent that no longer exists (canary E-04), inherited by the next agent of that name.
    const a = await newAgent();
    const g = await create({ members: tasks(a, 1), join: { agent: a, message: 'joined' } });
    await engine.agents.delete(a, 'test');
    expect(await groupRow(g.id)).toMatchObject({ status: 'failed', join_refused: 'agent_missing', join_execution_id: null });
    const left = await ts.store.db.selectFrom('executions').select(['id', 'status']).where('agent', '=', a).execute();
    expect(left.filter((r) => r.status === 'queued' || r.status === 'running')).toEqual([]);
  });

  it('cancel: a running group becomes cancelled, its members stop, no join is ever created', async () => {
    const a = await newAgent();
    const j = await newAgent();
    const g = await create({ members: tasks(a, 3), join: { agent: j, message: 'joined' } });
    await finish(g.id, 0, 'succeeded');
    const running = await claimMember(g.id, 1);
    expect(await engine.groups.cancel(g.id, 'key:test')).toEqual({ changed: true });
    expect(await groupRow(g.id)).toMatchObject({ status: 'cancelled', join_refused: 'cancelled', finished: 2 });
    expect(await latest(g.id, 2)).toMatchObject({ status: 'cancelled', error_code: 'group_cancelled' });
    expect((await latest(g.id, 1)).cancel_requested_at).not.toBeNull();
    await engine.complete(running.id, running.lease_token!, { status: 'succeeded', result: 'late' }, 'w1');
    expect(await groupRow(g.id)).toMatchObject({ status: 'cancelled', finished: 3, succeeded: 2 });
    expect(await joins(g.id)).toHaveLength(0);
    expect(await engine.groups.cancel(g.id, 'key:test')).toEqual({ changed: false });
    const audit = await ts.store.db.selectFrom('audit_log').select('action').where('subject', '=', g.id).orderBy('id').execute();
    expect(audit.map((r) => r.action)).toEqual(['group.create', 'group.cancel', 'group.cancel']);
  });

  it('cancel after the decision cancels the live join and keeps the decision', async () => {
    const a = await newAgent();
    const j = await newAgent();
    const g = await create({ members: tasks(a, 1), join: { agent: j, message: 'joined' } });
    await finish(g.id, 0, 'succeeded');
    const [join] = await joins(g.id);
    expect(await engine.groups.cancel(g.id, 'key:test')).toEqual({ changed: false });
    expect(await groupRow(g.id)).toMatchObject({ status: 'succeeded', join_execution_id: join!.id });
    expect((await joins(g.id))[0]).toMatchObject({ status: 'cancelled', error_code: 'group_cancelled' });
  });

  it('refuses the whole group with every failing item and its reason, writing nothing', async () => {
    const a = await newAgent({ max_backlog: 2 });
    const b = await newAgent();
    await engine.submit(a, { message: 'one queued already' }, 'test');
    await create({ members: [{ agent: b, message: 'keyed', idempotency_key: 'k-1' }] });
    const before = await counts();
    const err = await create({
      members: [
        { agent: a, message: 'fits' },
        { agent: 'no-such-agent', message: 'x' },
        { agent: a, message: 'no room' },
        { agent: b, message: 'key reused', idempotency_key: 'k-1' },
        { agent: b, message: 'fresh key', idempotency_key: 'k-2' },
        { agent: b, message: 'twice in the group', idempotency_key: 'k-2' },
      ],
      join: { agent: 'no-join-agent', message: 'x' },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BatonError);
    expect((err as BatonError).code).toBe('group_refused');
    expect(((err as BatonError).details.items as any[]).map((i) => [i.index, i.error])).toEqual([
      [1, 'agent_not_found'],
      [2, 'backlog_full'],
      [3, 'duplicate_idempotency_key'],
      [5, 'duplicate_idempotency_key'],
      ['join', 'agent_not_found'],
    ]);
    expect(await counts()).toEqual(before);
  });

  it('a member idempotency key is taken on its agent like a submit key, and stored on the member', async () => {
    const b = await newAgent();
    const g = await create({ members: [{ agent: b, message: 'keyed', idempotency_key: 'only-once' }] });
    expect((await latest(g.id, 0)).idempotency_key).toBe('only-once');
    const again = await create({ members: [{ agent: b, message: 'again', idempotency_key: 'only-once' }] }).catch((e: BatonError) => e);
    expect((again as BatonError).details.items).toEqual([expect.objectContaining({ index: 0, error: 'duplicate_idempotency_key' })]);
  });

  it('validates size, quorum and the join template', async () => {
    const a = await newAgent();
    const bad = async (input: GroupInput) => ((await create(input).catch((e: BatonError) => e)) as BatonError).message;
    expect(await bad({ members: [] })).toMatch(/body\.members/);
    expect(await bad({ members: tasks(a, 2), policy: 'quorum' })).toMatch(/body\.quorum/);
    expect(await bad({ members: tasks(a, 2), policy: 'quorum', quorum: 3 })).toMatch(/body\.quorum/);
    expect(await bad({ members: tasks(a, 2), quorum: 1 })).toMatch(/body\.quorum/);
    expect(await bad({ members: tasks(a, 1), join: { agent: a, message: '{{source.id}}' } })).toMatch(/body\.join\.message/);
  });
});

describe(`groups and retention (${STORE_KIND})`, () => {
  it('never prunes a member of a running group; prunes groups decided before the window', async () => {
    const a = await newAgent();
    const open = await create({ members: tasks(a, 2) });
    const decided = await create({ members: tasks(a, 1) });
    await finish(open.id, 0, 'succeeded', 'old');
    await finish(decided.id, 0, 'succeeded', 'old too');
    expect((await groupRow(decided.id)).status).toBe('succeeded');
    const later = clock() + 40 * 86_400_000;
    await pruneAll({ store: ts.store, settings: { retentionDays: 30, auditRetentionDays: 365 }, now: later });
    // The running group's finished member stays (its join will read it); the decided group goes, with its member.
    expect((await latest(open.id, 0)).status).toBe('succeeded');
    expect(await ts.store.db.selectFrom('execution_groups').select('id').where('id', 'in', [open.id, decided.id]).execute()).toEqual([
      { id: open.id },
    ]);
    expect(await ts.store.db.selectFrom('executions').select('id').where('group_id', '=', decided.id).execute()).toEqual([]);
  });
});

const counts = async () => ({
  executions: Number(
    (
      await ts.store.db
        .selectFrom('executions')
        .select((eb) => eb.fn.countAll().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  ),
  groups: Number(
    (
      await ts.store.db
        .selectFrom('execution_groups')
        .select((eb) => eb.fn.countAll().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  ),
  keys: Number(
    (
      await ts.store.db
        .selectFrom('idempotency_keys')
        .select((eb) => eb.fn.countAll().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  ),
});

interface Answer {
  status: number;
  body: any;
}
async function call(
  method: InjectOptions['method'],
  url: string,
  body?: unknown,
  headers: Record<string, string> = {},
  key = admin,
): Promise<Answer> {
  const res = await app.inject({
    method,
    url,
    headers: { authorization: `Bearer ${key}`, ...headers },
    ...(body === undefined ? {} : { payload: body as any }),
  });
  return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : null };
}

describe(`groups over HTTP (${STORE_KIND})`, () => {
  it('creates (201), shows, lists newest first, cancels', async () => {
    const a = await newAgent();
    const j = await newAgent();
    clock.advance(5); // newer than every group before
    const created = await call('POST', '/v1/groups', { members: tasks(a, 2), policy: 'all', join: { agent: j, message: 'x' } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      status: 'running',
      size: 2,
      progress: { finished: 0, succeeded: 0, failed: 0 },
      join: { agent: j },
    });
    const id = created.body.id;
    const shown = await call('GET', `/v1/groups/${id}`);
    expect(shown.status).toBe(200);
    expect(shown.body.members.map((m: any) => m.execution_id)).toEqual(created.body.members.map((m: any) => m.execution_id));
    clock.advance(5);
    const second = await call('POST', '/v1/groups', { members: tasks(a, 1) });
    expect(second.status).toBe(201);
    const page = await call('GET', '/v1/groups?limit=1');
    expect(page.body.groups.map((g: any) => g.id)).toEqual([second.body.id]);
    const next = await call('GET', `/v1/groups?limit=1&cursor=${page.body.next_cursor}`);
    expect(next.body.groups.map((g: any) => g.id)).toEqual([id]);
    const cancelled = await call('POST', `/v1/groups/${id}/cancel`);
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({ changed: true, group: { id, status: 'cancelled', join_refused: 'cancelled' } });
    expect(cancelled.body.group.members.map((m: any) => m.status)).toEqual(['cancelled', 'cancelled']);
  });

  it('the list says where each join stands, as show does: its agent, execution and status', async () => {
    const a = await newAgent();
    const j = await newAgent();
    clock.advance(5);
    const created = await call('POST', '/v1/groups', { members: tasks(a, 1), join: { agent: j, message: 'x' } });
    const id = created.body.id as string;
    const listed = async () => (await call('GET', '/v1/groups?limit=5')).body.groups.find((g: any) => g.id === id);
    expect((await listed()).join).toEqual({ agent: j, execution_id: null, status: null });
    await finish(id, 0, 'succeeded');
    const shown = (await call('GET', `/v1/groups/${id}`)).body;
    expect(shown.join).toMatchObject({ agent: j, status: 'queued' });
    expect(shown.join.execution_id).toMatch(/^ex_/);
    expect((await listed()).join).toEqual(shown.join);
  });

  it('Idempotency-Key returns the same group; a refusal is not stored', async () => {
    const a = await newAgent();
    const body = { members: tasks(a, 2) };
    const first = await call('POST', '/v1/groups', body, { 'idempotency-key': `grp-${n}` });
    const again = await call('POST', '/v1/groups', body, { 'idempotency-key': `grp-${n}` });
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.body.id).toBe(first.body.id);
    expect(await ts.store.db.selectFrom('execution_groups').select('id').where('idempotency_key', '=', `grp-${n}`).execute()).toHaveLength(
      1,
    );
    const other = await call('POST', '/v1/groups', { members: tasks(a, 1) }, { 'idempotency-key': `grp-${n}` });
    expect({ status: other.status, error: other.body.error }).toEqual({ status: 422, error: 'idempotency_key_reused' });

    // Refused for a missing agent, then the agent appears: the same key now creates the group.
    const late = `grp-late-${n}`;
    const lateBody = { members: [{ agent: late, message: 'x' }] };
    const no = await call('POST', '/v1/groups', lateBody, { 'idempotency-key': late });
    expect({ status: no.status, error: no.body.error }).toEqual({ status: 409, error: 'group_refused' });
    await engine.agents.create({ name: late }, 'test');
    expect((await call('POST', '/v1/groups', lateBody, { 'idempotency-key': late })).status).toBe(201);
  });

  it('answers 4xx with a machine-readable code naming the field', async () => {
    const a = await newAgent();
    const refused = await call('POST', '/v1/groups', {
      members: [
        { agent: a, message: 'x' },
        { agent: 'missing-agent', message: 'y' },
      ],
    });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ error: 'group_refused', items: [{ index: 1, error: 'agent_not_found' }] });
    expect(refused.body.items[0].message).toMatch(/members\[1\]\.agent/);
    const noMembers = await call('POST', '/v1/groups', { members: [] });
    expect(noMembers.status).toBe(400);
    expect(noMembers.body.message).toMatch(/members/);
    const tooMany = await call('POST', '/v1/groups', { members: tasks(a, 1001) });
    expect({ status: tooMany.status, error: tooMany.body.error }).toEqual({ status: 400, error: 'validation_error' });
    // A join naming a member the group does not have (it rendered as nothing).
    const pastEnd = await call('POST', '/v1/groups', { members: tasks(a, 2), join: { agent: a, message: 'sum {{members.2.result}}' } });
    expect({ status: pastEnd.status, error: pastEnd.body.error }).toEqual({ status: 400, error: 'validation_error' });
    expect(pastEnd.body.message).toMatch(/^body\.join\.message: .*members\.0 to members\.1/);
    const badPolicy = await call('POST', '/v1/groups', { members: tasks(a, 1), policy: 'most' });
    expect(badPolicy.body.message).toMatch(/policy/);
    const big = await call('POST', '/v1/groups', { members: [{ agent: a, message: 'x', payload: 'y'.repeat(300 * 1024) }] });
    expect({ status: big.status, error: big.body.error }).toEqual({ status: 413, error: 'payload_too_large' });
    expect(big.body.message).toMatch(/members\[0\]\.payload/);
    expect((await call('GET', '/v1/groups/gr_nope')).status).toBe(404);
    const keys = new KeyStore(ts.store);
    const agentKey = (await keys.create({ name: 'w', scope: 'agent', agent: a }, 'test')).key;
    const forbidden = await call('POST', '/v1/groups', { members: tasks(a, 1) }, {}, agentKey);
    expect({ status: forbidden.status, error: forbidden.body.error }).toEqual({ status: 403, error: 'forbidden' });
  });
});
