/**
 * The common claim and completion in one statement on PostgreSQL, and the seat counter
 * they decide from. Counted on the statements the engine really sends (a recording Kysely plugin),
 * on both stores: SQLite keeps its group-committed transactions, so its counts only show the
 * fallbacks taken there are the same code.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BREAKER_DEFAULTS } from '../../src/domain/breaker.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import type { Outcome } from '../../src/domain/outcomes.ts';
import { commitStats } from '../../src/store/sqlite.ts';
import { manualClock } from '../helpers/clock.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { counted, countingStore, noneSent } from '../helpers/counting-store.ts';
import { openTestStore, PG_URL, STORE_KIND, untilHearing, type TestStore } from '../helpers/store.ts';
import { agentMaker } from '../helpers/agents.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
const sent = noneSent();

const newAgent = agentMaker(() => engine, 'one', { max_parallel: 2, max_backlog: 100 });

const seats = async (agent: string) =>
  Number(
    (await ts.store.db.selectFrom('agents').select('running_count').where('name', '=', agent).executeTakeFirstOrThrow()).running_count,
  );

/** An agent's rows in one status, counted. */
const count = async (agent: string, status: 'queued' | 'running') =>
  (await ts.store.db.selectFrom('executions').select('id').where('agent', '=', agent).where('status', '=', status).execute()).length;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: countingStore(ts.store, sent), clock, nodeId: 'one-statement' });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

const pg = STORE_KIND === 'postgres';

describe(`one statement per common transition (${STORE_KIND})`, () => {
  it('a claim of an agent without holds is one statement, its claim stamp included', async () => {
    const agent = await newAgent({ breaker: null });
    for (let i = 0; i < 3; i++) {
      await engine.submit(agent, { message: `t${i}` }, 'test');
      clock.advance(1); // FIFO is by queued_at, then id
    }
    const first = await counted(sent, () => engine.claim(agent, { owner: 'w', max: 3 }));
    expect(first.out.map((r) => r.message)).toEqual(['t0', 't1']); // FIFO, up to the free seats
    expect(await seats(agent)).toBe(2);
    if (pg) expect(first.statements).toBe(1); // the claim, with the first stamp of last_claim_at
    const stamp = async () =>
      (await ts.store.db.selectFrom('agents').select('last_claim_at').where('name', '=', agent).executeTakeFirstOrThrow()).last_claim_at;
    expect(Number(await stamp())).toBe(clock());
    const empty = await counted(sent, () => engine.claim(agent, { owner: 'w', max: 3 }));
    expect(empty.out).toEqual([]);
    if (pg) expect(empty.statements).toBe(1); // no free seat
    expect(Number(await stamp())).toBe(clock());
  });

  it('claims of several agents asked for together are one call on PostgreSQL; each caller gets what it would alone', async () => {
    const plain = await Promise.all([newAgent({ breaker: null, max_parallel: 3 }), newAgent({ breaker: null, max_parallel: 1 })]);
    const paused = await newAgent({ breaker: null });
    const pushed = await newAgent({ breaker: null, delivery: 'push', push_url: 'http://127.0.0.1:9/never' });
    const serial = await newAgent({ breaker: null });
    for (const a of plain)
      for (let i = 0; i < 4; i++) {
        await engine.submit(a, { message: `${a}-${i}` }, 'test');
        clock.advance(1); // FIFO is by queued_at, then id
      }
    await engine.submit(paused, { message: 'p' }, 'test');
    await engine.agents.pause(paused, 'test', 'test');
    const keyed = await engine.submit(serial, { message: 's' }, 'test');
    await ts.store.db.updateTable('executions').set({ serial_key: 'k1' }).where('id', '=', keyed.id).execute();
    // Agents the call decides, together: one statement (rows, an empty answer, stamps and all).
    const idle = await newAgent({ breaker: null });
    const decided = await counted(sent, () =>
      Promise.all([engine.claim(plain[0]!, { owner: 'w1', max: 1 }), engine.claim(idle, { owner: 'w1', max: 1 })]),
    );
    expect(decided.out.map((r) => r.map((x) => x.message))).toEqual([[`${plain[0]}-0`], []]);
    if (pg) expect(decided.statements).toBe(1);
    // With those it cannot decide: each of these goes on to its transaction, which decides or refuses.
    const asked = await counted(sent, () =>
      Promise.allSettled([
        engine.claim(plain[0]!, { owner: 'w1', max: 2 }),
        engine.claim(plain[1]!, { owner: 'w2', max: 5 }),
        engine.claim(paused, { owner: 'w3', max: 1 }),
        engine.claim(pushed, { owner: 'w4', max: 1 }),
        engine.claim(serial, { owner: 'w5', max: 1 }),
        engine.claim('one-nobody', { owner: 'w6', max: 1 }),
      ]),
    );
    const [a, b, p, w, k, u] = asked.out;
    const rows = (r: PromiseSettledResult<ExecutionRow[]>) => (r.status === 'fulfilled' ? r.value : []);
    expect(rows(a!).map((r) => [r.message, r.lease_owner, r.attempt])).toEqual([
      [`${plain[0]}-1`, 'w1', 1],
      [`${plain[0]}-2`, 'w1', 1],
    ]);
    expect(rows(b!).map((r) => r.message)).toEqual([`${plain[1]}-0`]); // one seat
    expect(new Set([...rows(a!), ...rows(b!)].map((r) => r.lease_token)).size).toBe(3); // a token each
    expect(rows(p!)).toEqual([]);
    expect(w).toMatchObject({ status: 'rejected', reason: { code: 'wrong_delivery' } });
    expect(rows(k!).map((r) => r.id)).toEqual([keyed.id]); // the transaction path decided it
    expect(u).toMatchObject({ status: 'rejected', reason: { code: 'not_found' } });
    expect([await seats(plain[0]!), await seats(plain[1]!), await seats(paused), await seats(serial)]).toEqual([3, 1, 0, 1]);
  });

  it('a submit is one statement (its new-work turn, backlog count, row and audit row); a refusal writes neither', async () => {
    const agent = await newAgent({ max_backlog: 1 });
    const audits = async (action: string) =>
      ts.store.db
        .selectFrom('audit_log')
        .select(['execution_id', 'actor'])
        .where('subject', '=', agent)
        .where('action', '=', action)
        .execute();
    const made = await counted(sent, () => engine.submit(agent, { message: 'a' }, 'key:one'));
    expect(made.out.status).toBe('queued');
    if (pg) expect(made.statements).toBe(1); // the submit function's one call
    expect(await audits('execution.create')).toEqual([{ execution_id: made.out.id, actor: 'key:one' }]);
    // The backlog is full: the insert inserts nothing, so its audit row is not written either.
    await expect(engine.submit(agent, { message: 'b' }, 'key:one')).rejects.toMatchObject({ code: 'backlog_full' });
    expect(await count(agent, 'queued')).toBe(1);
    expect(await audits('execution.create')).toHaveLength(1);
    expect(await audits('execution.refused')).toHaveLength(1);
  });

  it('plain submits asked for together are one call on PostgreSQL; each refused one is told why', async () => {
    const small = await newAgent({ max_backlog: 2 });
    const big = await newAgent({ max_backlog: 10 });
    const asked: Array<[string, string]> = [
      [small, 's0'],
      [big, 'b0'],
      [small, 's1'],
      [big, 'b1'],
      [small, 's2'], // past the backlog: refused
      ['no-such-agent', 'x'],
      [big, 'b2'],
    ];
    const { out, statements } = await counted(sent, () =>
      Promise.allSettled(asked.map(([agent, message]) => engine.submit(agent, { message }, 'key:many'))),
    );
    expect(out.map((o) => o.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'rejected', 'rejected', 'fulfilled']);
    expect(out[4]).toMatchObject({ reason: { code: 'backlog_full' } });
    expect(out[5]).toMatchObject({ reason: { code: 'not_found' } });
    // Each agent's backlog exact.
    const messages = async (agent: string) =>
      (await ts.store.db.selectFrom('executions').select('message').where('agent', '=', agent).execute()).map((r) => r.message).sort();
    expect(await messages(small)).toEqual(['s0', 's1']);
    expect(await messages(big)).toEqual(['b0', 'b1', 'b2']);
    const created = out.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
    const audits = await ts.store.db
      .selectFrom('audit_log')
      .select(['execution_id', 'action', 'actor'])
      .where('subject', 'in', [small, big])
      .orderBy('id')
      .execute();
    expect(
      audits
        .filter((a) => a.action === 'execution.create')
        .map((a) => a.execution_id)
        .sort(),
    ).toEqual(created.map((r) => r.id).sort());
    expect(audits.filter((a) => a.action === 'execution.refused')).toHaveLength(1);
    // PostgreSQL: the call and the refusal's audit row (the refused submits, made alone to say why,
    // fail: the recording counts answered statements only).
    if (pg) expect(statements).toBe(2);
  });

  it('the one-statement submit writes what the transaction path writes: row, event, audit', async () => {
    const agent = await newAgent({
      max_redeliveries: 4,
      timeout_seconds: 77,
      lease_ttl_seconds: 13,
      retry_policy: { max_attempts: 3, base_seconds: 2, factor: 2, max_seconds: 60, jitter: 0 },
    });
    const inputs = [
      { message: 'plain' },
      {
        message: 'full',
        payload: { a: [1, 'x'] },
        priority: -2,
        run_after: clock() + 5_000,
        trigger: 'cli' as const,
        origin: { key_id: 'k1' },
        idempotency_key: 'idem-1',
        retry: { max_attempts: 2, base_seconds: 9, factor: 3, max_seconds: 90, jitter: 0.1 },
      },
    ];
    for (const input of inputs) {
      const alone = await counted(sent, () => engine.submit(agent, input, 'key:two'));
      // A no-op follow-up keeps the submit in its transaction (createExecutions under the hold).
      const inTx = await counted(sent, () => engine.submit(agent, input, 'key:two', async () => {}));
      if (pg) {
        expect(alone.statements).toBe(1);
        expect(inTx.statements).toBeGreaterThan(1);
      }
      const { id: a, ...aloneRest } = alone.out;
      const { id: b, ...inTxRest } = inTx.out;
      expect(aloneRest).toEqual(inTxRest);
      for (const id of [a, b]) {
        const [stored] = await ts.store.db.selectFrom('executions').selectAll().where('id', '=', id).execute();
        expect(stored).toEqual(id === a ? alone.out : inTx.out);
      }
      const events = await ts.store.db
        .selectFrom('execution_events')
        .select(['execution_id', 'from_status', 'to_status', 'at', 'actor', 'reason', 'attempt', 'seats_in_use', 'seat_cap'])
        .where('execution_id', 'in', [a, b])
        .orderBy('id')
        .execute();
      expect(events.map(({ execution_id, ...e }) => e)).toEqual([events[1], events[1]].map(({ execution_id, ...e }) => e));
      expect(events.map((e) => e.execution_id)).toEqual([a, b]);
      const audits = await ts.store.db
        .selectFrom('audit_log')
        .select(['execution_id', 'at', 'actor', 'action', 'subject', 'detail'])
        .where('execution_id', 'in', [a, b])
        .orderBy('id')
        .execute();
      expect(audits.map(({ execution_id, ...e }) => e)).toEqual([audits[1], audits[1]].map(({ execution_id, ...e }) => e));
      expect(audits.map((e) => e.execution_id)).toEqual([a, b]);
    }
    // An unknown agent is not found, as on the transaction path.
    await expect(engine.submit('no-such-agent', { message: 'x' }, 'test')).rejects.toMatchObject({ code: 'not_found' });
  });

  it('lone statements are announced: this process at once, another one by NOTIFY', async () => {
    const agent = await newAgent({ breaker: null });
    const here: string[] = [];
    const offHere = ts.store.subscribe('execution', (m) => void here.push(m));
    // A second process of the deployment (PostgreSQL: same schema, its own connections and origin).
    const twin = pg ? openPostgres({ url: PG_URL, schema: ts.location.schema, poolMax: 1 }) : undefined;
    const there: string[] = [];
    const offThere = twin?.subscribe('execution', (m) => void there.push(m));
    try {
      if (twin) await untilHearing(twin, ts.store);
      const row = await engine.submit(agent, { message: 'heard' }, 'test');
      const [claimed] = await engine.claim(agent, { owner: 'w', max: 1 });
      const done = await counted(sent, () => engine.complete(claimed!.id, claimed!.lease_token!, { status: 'succeeded' }, 'w'));
      if (pg) expect(done.statements).toBe(1);
      const expected = ['queued', 'running', 'succeeded'].map((status) => `${agent}\t${row.id}\t${status}`);
      await expect.poll(() => here, { timeout: 5_000 }).toEqual(expected);
      // Another process hears each of them; NOTIFYs sent from different pool connections may reach
      // it in either order (a loaded machine swapped the submit's and the claim's once in CI).
      if (twin) await expect.poll(() => [...there].sort(), { timeout: 10_000 }).toEqual([...expected].sort());
    } finally {
      offHere();
      offThere?.();
      await twin?.close();
    }
  });

  it('a plain success is one statement; one with something to follow runs its transaction', async () => {
    const agent = await newAgent({ breaker: null });
    await engine.submit(agent, { message: 'a' }, 'test');
    const [row] = await engine.claim(agent, { owner: 'w', max: 1 });
    const done = await counted(sent, () => engine.complete(row!.id, row!.lease_token!, { status: 'succeeded', result: { ok: true } }, 'w'));
    expect(done.out.status).toBe('succeeded');
    expect(await seats(agent)).toBe(0);
    if (pg) expect(done.statements).toBe(1);
    // A failure may retry: the transaction decides it, whatever the agent.
    await engine.submit(agent, { message: 'b' }, 'test');
    const [b] = await engine.claim(agent, { owner: 'w', max: 1 });
    const failed = await counted(sent, () =>
      engine.complete(b!.id, b!.lease_token!, { status: 'failed', error: { code: 'agent_error', message: 'x' } }, 'w'),
    );
    expect(failed.out.status).toBe('failed');
    expect(failed.statements).toBeGreaterThan(1);
    // A refusal still says why (the one statement wrote nothing; the transaction explains).
    await expect(engine.complete(b!.id, b!.lease_token!, { status: 'succeeded' }, 'w')).rejects.toMatchObject({
      code: 'lease_lost',
      message: expect.stringMatching(/already ended as failed/),
    });
  });

  it('plain successes asked for together are one statement on PostgreSQL, across agents', async () => {
    const agents = [await newAgent({ max_parallel: 3, breaker: null }), await newAgent({ max_parallel: 3, breaker: null })];
    const rows: ExecutionRow[] = [];
    for (const agent of agents) {
      for (let i = 0; i < 3; i++) await engine.submit(agent, { message: `p${i}` }, 'test');
      rows.push(...(await engine.claim(agent, { owner: 'w', max: 3 })));
    }
    const done = await counted(sent, () =>
      Promise.all(rows.map((r) => engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'w'))),
    );
    expect(done.out.map((r) => r.status)).toEqual(rows.map(() => 'succeeded'));
    if (pg) expect(done.statements).toBe(1);
    for (const agent of agents) expect(await seats(agent)).toBe(0);
  });

  it('one completion the database refuses does not fail the others asked for with it', async () => {
    const agent = await newAgent({ max_parallel: 4, breaker: null });
    for (let i = 0; i < 4; i++) await engine.submit(agent, { message: `f${i}` }, 'test');
    const rows = await engine.claim(agent, { owner: 'w', max: 4 });
    // PostgreSQL text cannot hold a NUL character: the statement carrying this actor fails whole
    // (SQLite stores it). The others are then completed alone, each with its own answer.
    const actors = ['w', 'w\u0000bad', 'w', 'w'];
    const out = await Promise.allSettled(rows.map((r, i) => engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, actors[i]!)));
    expect(out.map((o) => o.status)).toEqual(pg ? ['fulfilled', 'rejected', 'fulfilled', 'fulfilled'] : out.map(() => 'fulfilled'));
    expect(await count(agent, 'running')).toBe(pg ? 1 : 0);
    expect(await seats(agent)).toBe(pg ? 1 : 0);
  });

  it('completions asked for together: each caller its own answer, whatever path it took', async () => {
    const quiet = [await newAgent({ max_parallel: 4, breaker: null }), await newAgent({ max_parallel: 4, breaker: null })];
    const busy = await newAgent({ max_parallel: 4 }); // the default breaker, its window not yet full
    const rows: ExecutionRow[] = [];
    for (const agent of [...quiet, busy]) {
      for (let i = 0; i < 4; i++) await engine.submit(agent, { message: `m${i}` }, 'test');
      rows.push(...(await engine.claim(agent, { owner: 'w', max: 4 })));
    }
    expect(rows).toHaveLength(12);
    const [a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3] = rows;
    const ok = { status: 'succeeded' } as const;
    const asked: Array<[ExecutionRow, string, Outcome]> = [
      [a0!, a0!.lease_token!, { status: 'succeeded', result: { n: 1 } }],
      [a1!, a1!.lease_token!, { status: 'cancelled', error: { code: 'stopped', message: 'by the worker' } }],
      [a2!, 'ls_wrong', ok], // refused: not its lease
      [a3!, a3!.lease_token!, { status: 'failed', error: { code: 'boom', message: 'x' } }], // a failure: its transaction
      [b0!, b0!.lease_token!, ok],
      [b0!, b0!.lease_token!, ok], // the same completion twice: one lands, the other is told it already ended
      [b1!, b1!.lease_token!, { status: 'succeeded', usage: { tokens: 3 } }],
      [b2!, b2!.lease_token!, ok],
      [b3!, b3!.lease_token!, ok],
      ...[c0!, c1!, c2!, c3!].map((r): [ExecutionRow, string, Outcome] => [r, r.lease_token!, ok]), // the breaker counts: transactions
    ];
    const { out, statements } = await counted(sent, () =>
      Promise.allSettled(asked.map(([r, token, outcome]) => engine.complete(r.id, token, outcome, 'w'))),
    );
    const answer = (i: number) => out[i]!;
    for (const i of [0, 1, 6, 7, 8, 9, 10, 11, 12]) expect(answer(i).status, `completion ${i}`).toBe('fulfilled');
    expect(answer(2)).toMatchObject({ status: 'rejected', reason: { code: 'lease_lost' } });
    expect(answer(3)).toMatchObject({ status: 'fulfilled', value: { status: 'failed' } });
    // The same completion twice: exactly one lands (whichever ran first), the other is refused.
    const landed = [4, 5].filter((i) => answer(i).status === 'fulfilled');
    expect(landed).toHaveLength(1);
    expect(answer(landed[0] === 4 ? 5 : 4)).toMatchObject({
      status: 'rejected',
      reason: { code: 'lease_lost', message: expect.stringMatching(/already ended as succeeded/) },
    });
    const stored = new Map(
      (
        await ts.store.db
          .selectFrom('executions')
          .selectAll()
          .where(
            'id',
            'in',
            rows.map((r) => r.id),
          )
          .execute()
      ).map((r) => [r.id, r]),
    );
    for (const i of [0, 1, 6, 7, 8]) {
      const value = (answer(i) as PromiseFulfilledResult<ExecutionRow>).value;
      expect(value).toEqual(stored.get(asked[i]![0].id)); // the caller's answer is the row as stored
      expect(value.status).toBe(asked[i]![2].status);
      expect(value.completed_at).toBe(clock());
    }
    expect(stored.get(a0!.id)!.result).toBe('{"n":1}');
    expect(stored.get(a1!.id)).toMatchObject({ error_code: 'stopped', error_message: 'by the worker' });
    expect(stored.get(b1!.id)!.usage).toBe('{"tokens":3}');
    expect(stored.get(a2!.id)!.status).toBe('running');
    // One event per change, and the seat counters follow the rows.
    const events = await ts.store.db
      .selectFrom('execution_events')
      .select(['execution_id', 'to_status'])
      .where(
        'execution_id',
        'in',
        rows.map((r) => r.id),
      )
      .where('from_status', '=', 'running')
      .execute();
    expect(events).toHaveLength(11);
    for (const agent of [...quiet, busy]) expect(await seats(agent)).toBe(await count(agent, 'running'));
    expect(await seats(quiet[0]!)).toBe(1);
    expect(statements).toBeGreaterThan(0);
  });

  it("the default breaker: one statement from a new agent's first success until a failure", async () => {
    const agent = await newAgent({ max_parallel: 1 }); // breaker on, BREAKER_DEFAULTS
    const statements: number[] = [];
    const complete = async (outcome: { status: 'succeeded' } | { status: 'failed'; error: { code: string; message: string } }) => {
      await engine.submit(agent, { message: 'm' }, 'test');
      const [r] = await engine.claim(agent, { owner: 'w', max: 1 });
      statements.push((await counted(sent, () => engine.complete(r!.id, r!.lease_token!, outcome, 'w'))).statements);
    };
    for (let i = 0; i < 3; i++) await complete({ status: 'succeeded' });
    const window = async () =>
      (await ts.store.db.selectFrom('agents').select(['breaker_recent']).where('name', '=', agent).executeTakeFirstOrThrow())
        .breaker_recent;
    // A new agent's window starts full of successes; a success leaves it as it is.
    expect(await window()).toBe('0'.repeat(BREAKER_DEFAULTS.window));
    await complete({ status: 'failed', error: { code: 'boom', message: 'no' } });
    await complete({ status: 'succeeded' });
    expect(await window()).toBe('0'.repeat(BREAKER_DEFAULTS.window - 2) + '10');
    if (pg) {
      expect(statements.slice(0, 3)).toEqual([1, 1, 1]);
      // A failure in the window: each success shifts it, in the engine's transaction.
      expect(statements.slice(3).every((s) => s > 1)).toBe(true);
    }
  });

  it('holds and serial keys take the full admission: a paused agent admits nothing, a serial key one at a time', async () => {
    const paused = await newAgent({ breaker: null });
    await engine.submit(paused, { message: 'p' }, 'test');
    await engine.agents.pause(paused, 'test', 'test');
    expect(await engine.claim(paused, { owner: 'w', max: 2 })).toEqual([]);
    expect(await seats(paused)).toBe(0);

    const serial = await newAgent({ breaker: null });
    const s1 = await engine.submit(serial, { message: 's1' }, 'test');
    clock.advance(1);
    const s2 = await engine.submit(serial, { message: 's2' }, 'test');
    await ts.store.db.updateTable('executions').set({ serial_key: 'k' }).where('id', 'in', [s1.id, s2.id]).execute();
    const got = await engine.claim(serial, { owner: 'w', max: 2 });
    expect(got.map((r) => r.id)).toEqual([s1.id]);
    expect(await engine.claim(serial, { owner: 'w', max: 2 })).toEqual([]);
    expect(await seats(serial)).toBe(1);
  });

  it('an agent the claim call cannot decide is admitted by its transaction without asking the call again, until it can be', async () => {
    const agent = await newAgent({ breaker: null });
    for (let i = 0; i < 3; i++) {
      await engine.submit(agent, { message: `h${i}` }, 'test');
      clock.advance(1);
    }
    await engine.agents.pause(agent, 'test', 'test');
    // The first claim asks the call, which leaves a paused agent to the transaction (which stamps
    // the claim); the next goes there at once: its one read of the locked agent, where the hold stops it.
    expect(await engine.claim(agent, { owner: 'w', max: 1 })).toEqual([]);
    const next = await counted(sent, () => engine.claim(agent, { owner: 'w', max: 1 }));
    expect(next.out).toEqual([]);
    expect(next.statements).toBe(1);
    await engine.agents.resume(agent, 'test');
    // Its transaction reads that the call can decide it again: the claim after is the call's one statement.
    const again = await counted(sent, () => engine.claim(agent, { owner: 'w', max: 1 }));
    const fast = await counted(sent, () => engine.claim(agent, { owner: 'w', max: 1 }));
    expect([...again.out, ...fast.out].map((r) => r.message)).toEqual(['h0', 'h1']);
    if (pg) expect(fast.statements).toBe(1);
    expect(await seats(agent)).toBe(2);
  });

  it('the counter follows every way out of running: completion, release, cancellation, the reaper', async () => {
    const agent = await newAgent({ max_parallel: 4, breaker: null, lease_ttl_seconds: 30 });
    for (let i = 0; i < 4; i++) await engine.submit(agent, { message: `r${i}` }, 'test');
    const rows = await engine.claim(agent, { owner: 'w', max: 4 });
    expect(await seats(agent)).toBe(4);
    await engine.complete(rows[0]!.id, rows[0]!.lease_token!, { status: 'succeeded' }, 'w');
    await engine.release(rows[1]!.id, rows[1]!.lease_token!, 'w');
    await engine.cancel(rows[2]!.id, 'test');
    expect(await seats(agent)).toBe(2); // a cancel asked of a running row leaves it running
    clock.advance(60_000); // every lease lapses
    await engine.reapOnce();
    expect(await seats(agent)).toBe(await count(agent, 'running'));
  });

  it('a release is one statement on PostgreSQL; one whose cancellation was asked for ends in its transaction', async () => {
    const agent = await newAgent({ max_parallel: 3, breaker: null });
    for (let i = 0; i < 3; i++) await engine.submit(agent, { message: `l${i}` }, 'test');
    const rows = await engine.claim(agent, { owner: 'w', max: 3 });
    expect(await seats(agent)).toBe(3);
    const back = await counted(sent, () => engine.release(rows[0]!.id, rows[0]!.lease_token!, 'w'));
    if (pg) expect(back.statements).toBe(1);
    expect(back.out).toMatchObject({ status: 'queued', attempt: 0, lease_expires_at: null, deadline_at: null, change_reason: 'released' });
    expect(await seats(agent)).toBe(2);
    const events = await ts.store.db
      .selectFrom('execution_events')
      .select(['from_status', 'to_status', 'reason'])
      .where('execution_id', '=', rows[0]!.id)
      .orderBy('id')
      .execute();
    expect(events.at(-1)).toEqual({ from_status: 'running', to_status: 'queued', reason: 'released' });
    // Fencing: the same token again, or a wrong one, is refused and writes nothing.
    await expect(engine.release(rows[0]!.id, rows[0]!.lease_token!, 'w')).rejects.toMatchObject({ code: 'lease_lost' });
    await expect(engine.release(rows[1]!.id, 'ls_wrong', 'w')).rejects.toMatchObject({ code: 'lease_lost' });
    // A cancellation asked of a running row: its release cancels it, in the transaction path.
    await engine.cancel(rows[1]!.id, 'test');
    const ended = await counted(sent, () => engine.release(rows[1]!.id, rows[1]!.lease_token!, 'w'));
    if (pg) expect(ended.statements).toBeGreaterThan(1);
    expect(ended.out.status).toBe('cancelled');
    expect(await seats(agent)).toBe(1);
    expect(await count(agent, 'queued')).toBe(1);
  });

  it('concurrent submits fill the backlog exactly, one-statement and transaction-path creators alike', async () => {
    const agent = await newAgent({ max_backlog: 25, breaker: null });
    // One-statement submits race transaction-path creators of the same agent's work (a submit
    // with something to write after its row, a batch submit): the same turn, so the count is exact.
    const [results, batches] = await Promise.all([
      Promise.allSettled(
        Array.from({ length: 100 }, (_, i) => engine.submit(agent, { message: `c${i}` }, 'test', i % 3 === 0 ? async () => {} : undefined)),
      ),
      Promise.all(Array.from({ length: 5 }, (_, i) => engine.submitMany(agent, [{ message: `b${i}.0` }, { message: `b${i}.1` }], 'test'))),
    ]);
    const created = results.filter((r) => r.status === 'fulfilled').length + batches.flat().filter((o) => o.kind === 'created').length;
    const refused = results.filter((r) => r.status === 'rejected');
    expect(created).toBe(25);
    expect(refused.every((r) => (r as PromiseRejectedResult).reason?.code === 'backlog_full')).toBe(true);
    expect(await count(agent, 'queued')).toBe(25);
  });

  it('a heartbeat is one statement on PostgreSQL; on SQLite heartbeats arriving together share one commit', async () => {
    const agent = await newAgent({ max_parallel: 8, breaker: null });
    for (let i = 0; i < 8; i++) await engine.submit(agent, { message: `h${i}` }, 'test');
    const rows = await engine.claim(agent, { owner: 'w', max: 8 });
    expect(rows).toHaveLength(8);
    clock.advance(1_000);
    const one = await counted(sent, () => engine.heartbeat(rows[0]!.id, rows[0]!.lease_token!));
    expect(one.out.lease_expires_at).toBe(clock() + 30_000);
    if (pg) expect(one.statements).toBe(1);
    const before = { ...commitStats(ts.store) };
    await Promise.all(rows.map((r) => engine.heartbeat(r.id, r.lease_token!)));
    if (!pg) {
      // All eight arrive in one turn. One commit on an idle machine; a loaded one may end a group
      // at its work bound (GROUP_LIMITS.maxWorkMs) and commit the rest in the next, but they
      // still share: fewer commits than heartbeats.
      const after = commitStats(ts.store)!;
      expect(after.transactions - before.transactions!).toBe(rows.length);
      expect(after.commits - before.commits!).toBeLessThan(rows.length);
    }
    await expect(engine.heartbeat(rows[0]!.id, 'ls_wrong')).rejects.toMatchObject({ code: 'lease_lost' });
  });
});
