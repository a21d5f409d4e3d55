import fc from 'fast-check';
import { CompiledQuery, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CATALOGUE, isActivity } from '../../src/canary/catalogue.ts';
import { EVENTS_PER_CHUNK, EVENTS_PER_CYCLE, Frontier, GAP_SETTLE_MS } from '../../src/canary/events.ts';
import { replaySeats, seatsState } from '../../src/canary/invariants/history.ts';
import { runCanaryOnce, type CycleReport } from '../../src/canary/run.ts';
import { Canary } from '../../src/canary/service.ts';
import { Findings, MAX_FINDINGS, RecentlySeen, SEEN_GENERATION, type EventRow, type Finding } from '../../src/canary/types.ts';
import { Engine } from '../../src/engine/engine.ts';
import { manualClock } from '../helpers/clock.ts';
import { historyWalks, observed, writeRow } from '../helpers/canary.ts';
import { openTestStore, PG_URL, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { agentMaker } from '../helpers/agents.ts';

// The canary follows activity, not age: checkpoints (advancing, persisting, passing gaps only
// when they are permanent), the full check for what lies before them, S-02's carried state, and
// what a cycle reads (rows, and the plan of every query) on a database with a longer history.

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
const ACTIVITY = CATALOGUE.filter(isActivity).map((i) => i.id);

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, clock, nodeId: 'checkpoint-test' });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

const cycle = (o: { full?: boolean; readBudgetMs?: number } = {}) => runCanaryOnce({ store: ts.store, clock, ...o });
// The timer's cycles stop at a read budget: these count the events a cycle reads, whatever the machine's speed.
const NO_BUDGET = { readBudgetMs: Infinity };
const newAgent = agentMaker(() => engine, 'cp', { max_parallel: 1, max_backlog: 100 });
const findings = (r: CycleReport, id: string, subject: string) =>
  r.checks
    .find((c) => c.id === id)!
    .findings.filter((f) => f.subject === subject)
    .map((f) => f.reason);
const headEvent = async () =>
  Number(
    (
      await ts.store.db
        .selectFrom('execution_events')
        .select((eb) => eb.fn.max<number>('id').as('m'))
        .executeTakeFirstOrThrow()
    ).m,
  );
const checkpoints = async () =>
  new Map(
    (await ts.store.db.selectFrom('canary_checkpoints').selectAll().execute()).map((c) => [
      c.invariant,
      { event_id: Number(c.event_id), state: c.state },
    ]),
  );
const isOpen = async (id: string, subject: string) =>
  (await ts.store.db
    .selectFrom('canary_violations')
    .select('id')
    .where('invariant', '=', id)
    .where('subject', '=', subject)
    .where('resolved_at', 'is', null)
    .executeTakeFirst()) !== undefined;
const leftTerminalEvent = (execution_id: string, agent: string) => ({
  execution_id,
  agent,
  from_status: 'succeeded' as const,
  to_status: 'queued' as const,
  at: clock(),
  actor: 'bug',
  reason: null,
  attempt: 1,
  seats_in_use: null,
  seat_cap: null,
});

/** Submit, admit and complete `count` executions of `agent`: nine events for three, nothing left live. */
async function runToCompletion(agent: string, count: number) {
  for (let i = 0; i < count; i++) {
    await engine.submit(agent, { message: `t${i}` }, 'test');
    const [row] = await engine.claim(agent, { owner: 'worker:test' });
    await engine.complete(row!.id, row!.lease_token!, { status: 'succeeded' }, 'worker:test');
  }
}

describe('checkpoints', () => {
  it('advance to the newest event, persist, and a new Canary instance continues from them', async () => {
    const agent = await newAgent();
    await runToCompletion(agent, 2);
    const a = new Canary({ store: ts.store, nodeId: 'node-a', clock, intervalMs: 60_000, ...NO_BUDGET });
    const first = await a.runOnce();
    expect(first.events).toMatchObject({ after: 0, caught_up: true });
    const head = await headEvent();
    const stored = await checkpoints();
    for (const id of ACTIVITY) expect(stored.get(id)?.event_id).toBe(head);
    expect(stored.get('H-01')?.event_id).toBe(head);

    // A seat held at the checkpoint is carried in S-02's state.
    await engine.submit(agent, { message: 'held' }, 'test');
    const [held] = await engine.claim(agent, { owner: 'worker:test' });
    // Another process (or this one after a restart) continues from the stored checkpoints.
    const b = new Canary({ store: ts.store, nodeId: 'node-b', clock, intervalMs: 60_000, ...NO_BUDGET });
    const second = await b.runOnce();
    expect(second.events).toEqual({ after: head, through: head + 2, read: 2, caught_up: true });
    expect(JSON.parse((await checkpoints()).get('S-02')!.state!).seats[agent]).toEqual([held!.id]);
    // The status says how far the cycles have read, from any instance.
    expect((await a.status()).checkpoint).toEqual({ event_id: head + 2, latest_event_id: head + 2 });
    await engine.complete(held!.id, held!.lease_token!, { status: 'succeeded' }, 'worker:test');
    expect((await b.status()).checkpoint).toEqual({ event_id: head + 2, latest_event_id: head + 3 });
    await b.runOnce();
    expect(JSON.parse((await checkpoints()).get('S-02')!.state!).seats[agent]).toBeUndefined();
  });

  it('a cycle reads at most EVENTS_PER_CYCLE events; the next continues where it stopped', async () => {
    const agent = await newAgent();
    const row = await writeRow(ts.store, clock(), { agent });
    await cycle();
    const from = await headEvent();
    // More events than one cycle reads, the last of them a violation.
    const many = EVENTS_PER_CYCLE + 1_000;
    await sql`WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ${many})
      INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt)
      SELECT ${row.id}, ${agent}, 'queued', 'queued', cast(${clock()} as bigint), 'test', 'noise', 0 FROM k`.execute(ts.store.db);
    await ts.store.db.insertInto('execution_events').values(leftTerminalEvent(row.id, agent)).execute();
    const first = await cycle();
    expect(first.events).toEqual({ after: from, through: from + EVENTS_PER_CYCLE, read: EVENTS_PER_CYCLE, caught_up: false });
    expect(findings(first, 'E-02', row.id)).toEqual([]);
    expect((await checkpoints()).get('E-02')!.event_id).toBe(from + EVENTS_PER_CYCLE);
    const second = await cycle();
    expect(second.events).toMatchObject({ after: from + EVENTS_PER_CYCLE, read: 1_001, caught_up: true });
    expect(findings(second, 'E-02', row.id)).toEqual(['left_terminal']);
  });

  it('a cycle whose read budget is spent stops after the chunk in hand; the next continues where it stopped', async () => {
    const agent = await newAgent();
    const row = await writeRow(ts.store, clock(), { agent });
    await cycle();
    const from = await headEvent();
    await sql`WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ${EVENTS_PER_CHUNK + 10})
      INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt)
      SELECT ${row.id}, ${agent}, 'queued', 'queued', cast(${clock()} as bigint), 'test', 'noise', 0 FROM k`.execute(ts.store.db);
    await ts.store.db.insertInto('execution_events').values(leftTerminalEvent(row.id, agent)).execute();
    const first = await cycle({ readBudgetMs: 0 });
    expect(first.events).toEqual({ after: from, through: from + EVENTS_PER_CHUNK, read: EVENTS_PER_CHUNK, caught_up: false });
    expect((await checkpoints()).get('E-02')!.event_id).toBe(from + EVENTS_PER_CHUNK);
    const second = await cycle({ readBudgetMs: 0 });
    expect(second.events).toMatchObject({ after: from + EVENTS_PER_CHUNK, read: 11, caught_up: true });
    expect(findings(second, 'E-02', row.id)).toEqual(['left_terminal']);
  });

  it('the timer runs further cycles at once while one stops behind', async () => {
    await cycle();
    const agent = await newAgent();
    const row = await writeRow(ts.store, clock(), { agent });
    await sql`WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ${2 * EVENTS_PER_CYCLE + 10})
      INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt)
      SELECT ${row.id}, ${agent}, 'queued', 'queued', cast(${clock()} as bigint), 'test', 'noise', 0 FROM k`.execute(ts.store.db);
    const timer = new Canary({ store: ts.store, nodeId: 'node-timer', clock, intervalMs: 60_000, ...NO_BUDGET });
    const report = await timer.tick();
    expect(report!.events).toMatchObject({ caught_up: true });
    expect((await checkpoints()).get('E-02')!.event_id).toBe(await headEvent());
    // The further cycles judge the event log only: the first judged the state invariants over
    // every live row a moment before, and judging them again would hold a snapshot over the
    // whole backlog back to back.
    const judged = report!.checks.map((c) => c.id);
    expect(judged).toEqual(expect.arrayContaining(['E-02', 'S-02', 'H-01']));
    expect(judged).not.toContain('E-04');
    expect(judged).not.toContain('B-06');
    await timer.releaseLease();
  });

  it('RecentlySeen: each id once while it is among the last generations, never a Set that grows with history', () => {
    const seen = new RecentlySeen();
    expect(seen.fresh(['a', 'a', 'b'])).toEqual(['a', 'b']);
    expect(seen.fresh(['b', 'c'])).toEqual(['c']);
    const others = Array.from({ length: SEEN_GENERATION }, (_, i) => `x${i}`);
    expect(seen.fresh(others)).toHaveLength(SEEN_GENERATION);
    expect(seen.has('a')).toBe(true); // in the older generation
    expect(seen.fresh(others.map((x) => `y${x}`))).toHaveLength(SEEN_GENERATION);
    // Two generations later 'a' is judged again: a read more, no finding lost.
    expect(seen.fresh(['a', 'x0', 'yx0'])).toEqual(['a', 'x0']);
  });

  it('Findings keeps in bounded memory what the plain definition keeps from the whole list', () => {
    // The plain definition: the first finding per subject, subjects not open first, MAX_FINDINGS kept.
    const plain = (all: Finding[], open: ReadonlySet<string>) => {
      const seen = new Set<string>();
      const unique = all.filter((f) => !seen.has(f.subject) && (seen.add(f.subject), true));
      const fresh = unique.filter((f) => !open.has(f.subject));
      return {
        findings: [...fresh, ...unique.filter((f) => open.has(f.subject))].slice(0, MAX_FINDINGS),
        truncated: unique.length > MAX_FINDINGS,
        cutNew: fresh.length > MAX_FINDINGS,
      };
    };
    // Subjects from a small pool (many repeats) or a large one (past the cap); some open.
    const finding = (pool: number) => fc.record({ subject: fc.nat(pool).map((i) => `s${i}`), reason: fc.constantFrom('a', 'b', 'c') });
    const pool = fc.constantFrom(5, MAX_FINDINGS - 2, MAX_FINDINGS + 3, 3 * MAX_FINDINGS);
    fc.assert(
      fc.property(
        pool.chain((p) =>
          fc.tuple(
            fc.array(fc.array(finding(p), { size: 'max', maxLength: 2 * MAX_FINDINGS }), { maxLength: 4 }),
            fc.uniqueArray(
              fc.nat(p).map((i) => `s${i}`),
              { size: 'max', maxLength: 2 * MAX_FINDINGS },
            ),
          ),
        ),
        ([batches, openList]) => {
          const open = new Set(openList);
          const found = new Findings(open);
          for (const b of batches) found.add(b);
          return JSON.stringify(found.result()) === JSON.stringify(plain(batches.flat(), open));
        },
      ),
      // Large inputs: report the first counterexample as found (shrinking them takes minutes).
      { numRuns: 200, endOnFailure: true },
    );
  });

  it('a stopping process ends the catch-up after the cycle in hand; the next leader goes on from its checkpoint', async () => {
    const agent = await newAgent();
    const row = await writeRow(ts.store, clock(), { agent });
    await cycle();
    const from = await headEvent();
    await sql`WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ${2 * EVENTS_PER_CYCLE + 10})
      INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt)
      SELECT ${row.id}, ${agent}, 'queued', 'queued', cast(${clock()} as bigint), 'test', 'noise', 0 FROM k`.execute(ts.store.db);
    const leaving = new Canary({ store: ts.store, nodeId: 'node-leaving', clock, intervalMs: 60_000, ...NO_BUDGET });
    expect(await leaving.acquireLease()).toBe(true);
    const stopping = new AbortController();
    stopping.abort();
    const report = await leaving.cycleOnce(stopping.signal);
    expect(report.events).toMatchObject({ read: EVENTS_PER_CYCLE, caught_up: false });
    expect((await checkpoints()).get('E-02')!.event_id).toBe(from + EVENTS_PER_CYCLE);
    await leaving.releaseLease();
    const next = new Canary({ store: ts.store, nodeId: 'node-next', clock, intervalMs: 60_000, ...NO_BUDGET });
    expect((await next.tick())!.events).toMatchObject({ caught_up: true });
    expect((await checkpoints()).get('E-02')!.event_id).toBe(await headEvent());
    await next.releaseLease();
  });

  it('more new findings than a cycle keeps: the checkpoint waits until every subject is open', async () => {
    const agent = await newAgent();
    await cycle();
    const before = (await checkpoints()).get('E-03')!.event_id;
    const count = MAX_FINDINGS + 10;
    await sql`WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ${count})
      INSERT INTO executions (id, agent, trigger_kind, origin, message, payload, priority, status, attempt, max_redeliveries, timeout_seconds, lease_ttl_seconds, created_at, queued_at, changed_at, changed_by)
      SELECT 'ex_many_' || ${agent} || '_' || i, ${agent}, 'api', '{}', 'broken', 'null', 0, 'failed', 0, 3, 900, 30, t, t, t, 'test' FROM k, (SELECT cast(${clock()} as bigint) AS t) c`.execute(
      ts.store.db,
    );
    const open = async () =>
      Number(
        (
          await ts.store.db
            .selectFrom('canary_violations')
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .where('invariant', '=', 'E-03')
            .where('agent', '=', agent)
            .where('resolved_at', 'is', null)
            .executeTakeFirstOrThrow()
        ).n,
      );
    const first = await cycle();
    expect(first.checks.find((c) => c.id === 'E-03')!.truncated).toBe(true);
    expect(await open()).toBe(MAX_FINDINGS);
    expect((await checkpoints()).get('E-03')!.event_id).toBe(before);
    await cycle();
    expect(await open()).toBe(count);
    expect((await checkpoints()).get('E-03')!.event_id).toBe(await headEvent());
    await ts.store.db.updateTable('executions').set({ completed_at: clock() }).where('agent', '=', agent).execute();
    await cycle(); // still more than a cycle keeps were open: nothing is resolved …
    await cycle(); // … until a cycle keeps them all
    expect(await open()).toBe(0);
  });
});

describe('before and after the checkpoint', () => {
  it('a violation after the checkpoint is found by the next cycle', async () => {
    const agent = await newAgent();
    const row = await writeRow(ts.store, clock(), {
      agent,
      status: 'succeeded',
      started_at: clock(),
      completed_at: clock(),
      duration_ms: 0,
    });
    await cycle();
    await ts.store.db.insertInto('execution_events').values(leftTerminalEvent(row.id, agent)).execute();
    const next = await cycle();
    expect(findings(next, 'E-02', row.id)).toEqual(['left_terminal']);
    // Still open later: the recheck keeps a historical fact open, though its event lies behind the checkpoint now.
    expect(findings(await cycle(), 'E-02', row.id)).toEqual(['left_terminal']);
    expect(await isOpen('E-02', row.id)).toBe(true);
  });

  it('a violation before the checkpoint is missed by a normal cycle and found by the full check', async () => {
    const agent = await newAgent();
    const row = await writeRow(ts.store, clock(), {
      agent,
      status: 'succeeded',
      started_at: clock(),
      completed_at: clock(),
      duration_ms: 0,
    });
    const old = await writeRow(ts.store, clock(), {
      agent,
      status: 'succeeded',
      started_at: clock(),
      completed_at: clock(),
      duration_ms: 0,
    });
    await ts.store.db.insertInto('execution_events').values(leftTerminalEvent(old.id, agent)).execute();
    // A history from before checkpoints were kept: the checkpoints start at the newest event.
    const head = await headEvent();
    await ts.store.db.updateTable('canary_checkpoints').set({ event_id: head }).where('invariant', 'in', ACTIVITY).execute();
    // A writer that bypasses the engine breaks a row without a status change, so without an event.
    await ts.store.db.updateTable('executions').set({ duration_ms: null }).where('id', '=', row.id).execute();
    const normal = await cycle();
    expect(findings(normal, 'E-03', row.id)).toEqual([]);
    expect(findings(normal, 'E-02', old.id)).toEqual([]);
    const full = await cycle({ full: true });
    expect(full.full).toBe(true);
    expect(full.events).toMatchObject({ after: 0, caught_up: true });
    expect(findings(full, 'E-03', row.id)).toEqual(['ran_without_duration']);
    expect(findings(full, 'E-02', old.id)).toEqual(['left_terminal']);
    // The full check moved no checkpoint; normal cycles keep what it opened open, and resolve it once fixed.
    expect((await checkpoints()).get('E-03')!.event_id).toBe(head);
    await cycle();
    expect(await isOpen('E-03', row.id)).toBe(true);
    await ts.store.db.updateTable('executions').set({ duration_ms: 0 }).where('id', '=', row.id).execute();
    await cycle();
    expect(await isOpen('E-03', row.id)).toBe(false);
    expect(await isOpen('E-02', old.id)).toBe(true);
  });
});

describe('S-02 carries its seats forward', () => {
  const op = fc.record({
    agent: fc.constantFrom('a', 'b'),
    exec: fc.integer({ min: 0, max: 4 }),
    kind: fc.constantFrom('admit', 'release', 'other'),
    cap: fc.integer({ min: 1, max: 3 }),
    lie: fc.boolean(),
  });
  interface Op {
    agent: string;
    exec: number;
    kind: string;
    cap: number;
    lie: boolean;
  }
  const toEvents = (ops: Op[]): EventRow[] =>
    ops.map((o, i) => ({
      id: i + 1,
      execution_id: `${o.agent}-${o.exec}`,
      agent: o.agent,
      from_status: o.kind === 'release' ? 'running' : 'queued',
      to_status: o.kind === 'admit' ? 'running' : o.kind === 'release' ? 'succeeded' : 'cancelled',
      at: 0,
      seats_in_use: o.kind === 'admit' ? (o.lie ? o.cap + 1 : 1) : null,
      seat_cap: o.kind === 'admit' ? o.cap : null,
      flow_key: null,
    }));

  it('a replay continued from saved state at any cut points equals one replay from the start', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 80 }), fc.array(fc.integer({ min: 0, max: 80 }), { maxLength: 6 }), (ops, cuts) => {
        const events = toEvents(ops);
        const whole = seatsState.initial();
        const expected = replaySeats(events, whole);
        const bounds = [0, ...[...new Set(cuts)].sort((x, y) => x - y), events.length];
        let saved = seatsState.save(seatsState.initial());
        const carried = [];
        for (let i = 0; i + 1 < bounds.length; i++) {
          const state = seatsState.load(saved);
          carried.push(...replaySeats(events.slice(bounds[i], bounds[i + 1]), state));
          saved = seatsState.save(state);
        }
        expect(carried).toEqual(expected);
        expect(saved).toBe(seatsState.save(whole));
      }),
      { numRuns: 300 },
    );
  });

  it('through the database: cycles at random points find what one full check finds', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(op, { minLength: 1, maxLength: 25 }),
        fc.array(fc.boolean(), { minLength: 25, maxLength: 25 }),
        async (ops, cycleAfter) => {
          await cycle();
          const agents = { a: await newAgent(), b: await newAgent() };
          const rows = new Map<string, string>();
          for (const o of ops) {
            const key = `${o.agent}-${o.exec}`;
            if (!rows.has(key)) rows.set(key, (await writeRow(ts.store, clock(), { agent: agents[o.agent as 'a' | 'b'] })).id);
          }
          // Over-admitted subjects: a cycle keeps one reason per subject, so compare subjects.
          const mine = new Set(rows.values());
          const found = new Set<string>();
          const collect = (r: CycleReport) =>
            r.checks
              .find((c) => c.id === 'S-02')!
              .findings.filter((f) => mine.has(f.subject))
              .map((f) => f.subject);
          for (const [i, e] of toEvents(ops).entries()) {
            const { id: _id, ...event } = e;
            await ts.store.db
              .insertInto('execution_events')
              .values({
                ...event,
                execution_id: rows.get(e.execution_id)!,
                agent: agents[e.agent as 'a' | 'b'],
                from_status: e.from_status as any,
                to_status: e.to_status as any,
                at: clock(),
                actor: 'test',
                reason: null,
                attempt: 1,
              })
              .execute();
            if (cycleAfter[i]) for (const s of collect(await cycle())) found.add(s);
          }
          for (const s of collect(await cycle())) found.add(s);
          const full = new Set(collect(await cycle({ full: true })));
          expect([...found].sort()).toEqual([...full].sort());
        },
      ),
      { numRuns: 5 },
    );
  });
});

describe('gaps in event ids', () => {
  const ev = (id: number, at: number) => ({ id, at });

  it('a checkpoint passes a contiguous run, stops at a young gap, and passes a gap once it is old', () => {
    const now = 1_000_000;
    const f = new Frontier(10, now);
    for (const e of [ev(11, now), ev(12, now)]) f.feed(e);
    expect(f).toMatchObject({ at: 12, blocked: false });
    f.feed(ev(14, now - GAP_SETTLE_MS + 1)); // 13 may still commit
    f.feed(ev(15, now - 10 * GAP_SETTLE_MS)); // stays stopped for the rest of the cycle
    expect(f).toMatchObject({ at: 12, blocked: true });
    const later = new Frontier(12, now);
    later.feed(ev(14, now - GAP_SETTLE_MS - 1)); // 13 never came: rolled back or pruned
    later.feed(ev(15, now));
    expect(later).toMatchObject({ at: 15, blocked: false });
  });

  it.runIf(STORE_KIND === 'postgres')('an event committed after the canary read higher ids is still judged (two connections)', async () => {
    const agent = await newAgent({ max_parallel: 5 });
    const row = await writeRow(ts.store, clock(), {
      agent,
      status: 'succeeded',
      started_at: clock(),
      completed_at: clock(),
      duration_ms: 0,
    });
    await cycle();
    const other = new pg.Client({ connectionString: PG_URL, options: `-c search_path=${ts.location.schema}` });
    await other.connect();
    try {
      await other.query('BEGIN');
      const e = leftTerminalEvent(row.id, agent);
      const held = await other.query(
        'INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id',
        [e.execution_id, e.agent, e.from_status, e.to_status, e.at, e.actor, e.reason, e.attempt],
      );
      const gap = Number(held.rows[0].id);
      // Later events commit first.
      await engine.submit(agent, { message: 'after the gap' }, 'test');
      const during = await cycle();
      expect(during.events!.through).toBeGreaterThan(gap);
      expect(findings(during, 'E-02', row.id)).toEqual([]);
      for (const id of ACTIVITY) expect((await checkpoints()).get(id)!.event_id).toBe(gap - 1);
      await other.query('COMMIT');
      const after = await cycle();
      expect(findings(after, 'E-02', row.id)).toEqual(['left_terminal']);
      expect((await checkpoints()).get('E-02')!.event_id).toBe(await headEvent());

      // A rolled-back id is a permanent gap: passed once the event after it is older than the margin.
      await other.query('BEGIN');
      await other.query(
        'INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt) VALUES ($1, $2, $3, $3, $4, $5, null, 0)',
        [row.id, agent, 'succeeded', clock(), 'test'],
      );
      await other.query('ROLLBACK');
      await engine.submit(agent, { message: 'after the rollback' }, 'test');
      const head = await headEvent();
      await cycle();
      expect((await checkpoints()).get('E-02')!.event_id).toBeLessThan(head);
      clock.advance(GAP_SETTLE_MS + 1);
      await cycle();
      expect((await checkpoints()).get('E-02')!.event_id).toBe(head);
    } finally {
      await other.end();
    }
  });
});

describe('what a cycle costs follows activity, not history', () => {
  it('the same activity reads the same rows with 30 or 3,000 executions of history', async () => {
    const o = observed(ts.store);
    const agent = await newAgent({ max_parallel: 1 });
    const measure = async () => {
      await runCanaryOnce({ store: o.store, clock }); // catch up first
      await runToCompletion(agent, 3);
      o.reset();
      const r = await runCanaryOnce({ store: o.store, clock });
      return { rows: o.rows, events: r.events!.read };
    };
    await runToCompletion(agent, 10);
    const small = await measure();
    // History: 3,000 finished executions (with their creation events).
    await sql`WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 3000)
      INSERT INTO executions (id, agent, trigger_kind, origin, message, payload, priority, status, attempt, max_redeliveries, timeout_seconds, lease_ttl_seconds, created_at, queued_at, started_at, completed_at, duration_ms, changed_at, changed_by)
      SELECT 'ex_hist_' || ${agent} || '_' || i, ${agent}, 'api', '{}', 'old', 'null', 0, 'succeeded', 1, 3, 900, 30, t, t, t, t, 1, t, 'test' FROM k, (SELECT cast(${clock()} as bigint) AS t) c`.execute(
      ts.store.db,
    );
    const large = await measure();
    expect(small.events).toBe(9);
    expect(large).toEqual(small);
  });

  it('every query of a cycle seeks an index made for its shape (EXPLAIN, sequential scans off on PostgreSQL)', async () => {
    const o = observed(ts.store);
    const agent = await newAgent({ max_parallel: 2 });
    const push = await newAgent({ delivery: 'push', push_url: 'http://127.0.0.1:9/none' });
    await runToCompletion(agent, 2);
    await engine.submit(push, { message: 'queued' }, 'test');
    await engine.submit(agent, { message: 'held' }, 'test');
    await engine.claim(agent, { owner: 'worker:test' }); // a seat S-02 carries (and prunes)
    // Open violations, rechecked next cycle: E-03 on its row, E-02 on its events, S-02 by existence.
    const broken = await writeRow(ts.store, clock(), { agent, status: 'failed' });
    const ended = await writeRow(ts.store, clock(), {
      agent,
      status: 'succeeded',
      started_at: clock(),
      completed_at: clock(),
      duration_ms: 0,
    });
    await ts.store.db.insertInto('execution_events').values(leftTerminalEvent(ended.id, agent)).execute();
    const over = await writeRow(ts.store, clock(), { agent });
    await ts.store.db
      .insertInto('execution_events')
      .values({ ...leftTerminalEvent(over.id, agent), from_status: 'queued', to_status: 'running', seats_in_use: 3, seat_cap: 2 })
      .execute();
    await runCanaryOnce({ store: o.store, clock });
    expect([await isOpen('E-03', broken.id), await isOpen('E-02', ended.id), await isOpen('S-02', over.id)]).toEqual([true, true, true]);
    const cancelled = await engine.submit(agent, { message: 'cancel me' }, 'test');
    await engine.cancel(cancelled.id, 'test'); // E-08 judges it on its row
    o.reset();
    await runCanaryOnce({ store: o.store, clock });
    expect(o.queries.length).toBeGreaterThan(20);
    if (process.env.BATON_SHOW_PLANS) for (const q of o.queries) console.log(q.sql);
    expect(await historyWalks(ts.store, o.queries)).toEqual([]);
    // The checker itself fires on a walk through history.
    const walk = await historyWalks(ts.store, [
      CompiledQuery.raw(`SELECT count(*) FROM executions WHERE error_code = ${ts.store.kind === 'postgres' ? '$1' : '?'}`, ['x']),
    ]);
    expect(walk).toHaveLength(1);
    await ts.store.db.updateTable('executions').set({ completed_at: clock() }).where('id', '=', broken.id).execute();
  });

  it('a full check reads each chunk of executions by its id range, never through a status index', async () => {
    await runToCompletion(await newAgent({ max_parallel: 2 }), 3);
    const o = observed(ts.store);
    await runCanaryOnce({ store: o.store, clock, full: true });
    // (A first chunk has no lower bound.)
    const ranged = o.queries.filter((q) => /from "executions"/.test(q.sql) && /"id" <= /.test(q.sql));
    expect(ranged.length).toBeGreaterThan(0);
    const viaStatus = async (queries: CompiledQuery[]) => {
      const out: string[] = [];
      for (const q of queries) {
        const text = ts.store.kind === 'sqlite' ? `EXPLAIN QUERY PLAN ${q.sql}` : `EXPLAIN ${q.sql}`;
        const plan = await ts.store.db.executeQuery<Record<string, string>>(CompiledQuery.raw(text, [...q.parameters]));
        const lines = plan.rows.map((r) => r.detail ?? r['QUERY PLAN'] ?? '').join('\n');
        if (/status_recent/.test(lines)) out.push(`${q.sql}\n${lines}`);
      }
      return out;
    };
    expect(await viaStatus(ranged)).toEqual([]);
    // The form E-03 used before: on SQLite, without statistics, `status IN (the finished states)`
    // was a seek per status into executions_status_recent (every finished row, once per chunk).
    if (ts.store.kind === 'sqlite') {
      const before = CompiledQuery.raw(
        `select "id" from "executions" where "id" > ? and "id" <= ? and "status" in ('succeeded', 'failed', 'cancelled', 'skipped') and "completed_at" is null`,
        ['ex_0', 'ex_z'],
      );
      expect(await viaStatus([before])).toHaveLength(1);
    }
  });
});
