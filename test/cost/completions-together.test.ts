/**
 * Completions that take the engine's transaction (here: the default breaker with a failure in its
 * window, which counts each success), asked for together, share one transaction, and each caller
 * still gets the answer it would get alone: the row as stored, or the refusal of its lease.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import type { StoreAdapter, Tx } from '../../src/store/adapter.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { agentMaker } from '../helpers/agents.ts';
import { countingStore as countingStatements, noneSent } from '../helpers/counting-store.ts';
import { manualClock } from '../helpers/clock.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
let transactions = 0;
/** The statements the engine's store sent (a transaction's BEGIN and COMMIT not included). */
const sent = noneSent();
/** Set: the next transaction fails once its work is done (as a failed COMMIT would): nothing of it stays. */
let failNext = false;
/** Set: the next transaction waits for this before it starts its work. */
let holdNext: Promise<void> | undefined;
/** Set: the next transaction, its work done (its locks taken), calls `reached` and waits for `until` before its COMMIT. */
let holdBeforeCommit: { until: Promise<void>; reached: () => void } | undefined;
const clock = manualClock();

/** The same store, counting the transactions begun through it. */
function countingStore(inner: StoreAdapter): StoreAdapter {
  return Object.assign(Object.create(inner) as StoreAdapter, {
    transaction: <T>(fn: (tx: Tx) => Promise<T>) => {
      transactions++;
      const hold = holdNext;
      holdNext = undefined;
      if (hold) return inner.transaction(async (tx) => (await hold, fn(tx)));
      const before = holdBeforeCommit;
      holdBeforeCommit = undefined;
      if (before)
        return inner.transaction(async (tx) => {
          const out = await fn(tx);
          before.reached();
          await before.until;
          return out;
        });
      if (!failNext) return inner.transaction(fn);
      failNext = false;
      return inner.transaction(async (tx) => {
        await fn(tx);
        throw new Error('injected: the transaction failed');
      });
    },
  });
}

const newAgent = agentMaker(() => engine, 'together', { max_parallel: 8, max_backlog: 100 });

/** A new agent whose breaker window holds one failure: each success then shifts it, in the engine's transaction. */
async function dirtyAgent(): Promise<string> {
  const agent = await newAgent();
  const [row] = await claimed(agent, 1);
  await engine.complete(row!.id, row!.lease_token!, { status: 'failed', error: { code: 'boom', message: 'no' } }, 'w');
  return agent;
}
/** dirtyAgent's window after `k` successes. */
const dirtyAfter = (k: number) => ('0'.repeat(19) + '1' + '0'.repeat(k)).slice(-20);

async function claimed(agent: string, n: number): Promise<ExecutionRow[]> {
  for (let i = 0; i < n; i++) await engine.submit(agent, { message: `m${i}` }, 'test');
  return engine.claim(agent, { owner: 'w', max: n });
}

const stored = (ids: string[]) => ts.store.db.selectFrom('executions').selectAll().where('id', 'in', ids).orderBy('id').execute();
const breakerRecent = async (agent: string) =>
  (await ts.store.db.selectFrom('agents').select('breaker_recent').where('name', '=', agent).executeTakeFirstOrThrow()).breaker_recent;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: countingStore(countingStatements(ts.store, sent)), clock, nodeId: 'together' });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

describe(`completions that take a transaction, asked for together (${STORE_KIND})`, () => {
  it('share one transaction across agents; each answer is its own, a refused lease refused alone', async () => {
    const [a, b] = [await dirtyAgent(), await dirtyAgent()];
    const rows = [...(await claimed(b, 3)), ...(await claimed(a, 3))];
    transactions = 0;
    const tokens = rows.map((r, i) => (i === 1 ? 'ls_not_its_lease' : r.lease_token!));
    const out = await Promise.allSettled(rows.map((r, i) => engine.complete(r.id, tokens[i]!, { status: 'succeeded' }, 'w')));
    expect(transactions).toBe(1);
    expect(out[1]).toMatchObject({ status: 'rejected', reason: { code: 'lease_lost' } });
    const after = new Map((await stored(rows.map((r) => r.id))).map((r) => [r.id, r]));
    rows.forEach((r, i) => {
      if (i === 1) return expect(after.get(r.id)!.status).toBe('running');
      expect(out[i]).toEqual({ status: 'fulfilled', value: after.get(r.id) });
      expect(after.get(r.id)!.status).toBe('succeeded');
    });
    // Each success counted on its agent's breaker, as alone.
    expect(await breakerRecent(a)).toBe(dirtyAfter(3));
    expect(await breakerRecent(b)).toBe(dirtyAfter(2));
  });

  it('their agents are read once and their breakers written once (on PostgreSQL one statement for all), not once a completion', async () => {
    const [a, b] = [await dirtyAgent(), await dirtyAgent()];
    const rows = [...(await claimed(a, 3)), ...(await claimed(b, 3))];
    transactions = 0;
    sent.statements = 0;
    await Promise.all(rows.map((r) => engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'w')));
    expect(transactions).toBe(1);
    // The rows' agents, the agents locked, the compare-and-sets (on PostgreSQL one statement for
    // all, on SQLite one each), the agents' profiles, the breakers' writes (on PostgreSQL one
    // statement for both agents, on SQLite one each); on PostgreSQL first the fast path's one
    // call, which their facts refuse.
    expect(sent.statements).toBe(STORE_KIND === 'postgres' ? 1 + 1 + 1 + 1 + 1 + 1 : 1 + 1 + 6 + 1 + 2);
    expect(await breakerRecent(a)).toBe(dirtyAfter(3));
    expect(await breakerRecent(b)).toBe(dirtyAfter(3));
  });

  it('failures counted together open the breaker once, at the failure that opens it alone', async () => {
    const agent = await newAgent();
    const rows = await claimed(agent, 6);
    transactions = 0;
    const fail = { status: 'failed' as const, error: { code: 'boom', message: 'no' } };
    await Promise.all(rows.map((r) => engine.complete(r.id, r.lease_token!, fail, 'w')));
    expect(transactions).toBe(1);
    const row = await ts.store.db
      .selectFrom('agents')
      .select(['breaker_state', 'breaker_consecutive', 'fast_claim'])
      .where('name', '=', agent)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ breaker_state: 'open', breaker_consecutive: 0, fast_claim: 0 });
    const opened = await ts.store.db
      .selectFrom('audit_log')
      .select(['execution_id'])
      .where('action', '=', 'agent.breaker')
      .where('subject', '=', agent)
      .execute();
    // Counted in id order (the shared transaction's order): the fifth opens it, the sixth is not counted.
    expect(opened.map((o) => o.execution_id)).toEqual([[...rows].map((r) => r.id).sort()[4]]);
  });

  it('a completion alone is its own transaction', async () => {
    const agent = await dirtyAgent();
    const [row] = await claimed(agent, 1);
    transactions = 0;
    await engine.complete(row!.id, row!.lease_token!, { status: 'succeeded' }, 'w');
    expect(transactions).toBe(1);
  });

  it('a failure of the shared transaction: nothing of it stays, and each completion is then made alone', async () => {
    const agent = await dirtyAgent();
    const rows = await claimed(agent, 3);
    transactions = 0;
    failNext = true;
    const out = await Promise.allSettled(rows.map((r) => engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'w')));
    expect(transactions).toBe(4);
    const after = new Map((await stored(rows.map((r) => r.id))).map((r) => [r.id, r]));
    rows.forEach((r, i) => expect(out[i]).toEqual({ status: 'fulfilled', value: after.get(r.id) }));
    expect([...after.values()].map((r) => r.status)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    // Counted once each: the failed transaction's counts did not stay.
    expect(await breakerRecent(agent)).toBe(dirtyAfter(3));
  });

  // SQLite has one writer: a transaction held open holds every other (its group commit gathers them).
  it.skipIf(STORE_KIND === 'sqlite')('while one shared transaction is out, completions asked for meanwhile go in another', async () => {
    const [a, b] = [await dirtyAgent(), await dirtyAgent()];
    const first = await claimed(a, 2);
    const second = await claimed(b, 2);
    let release!: () => void;
    holdNext = new Promise<void>((r) => (release = r));
    const complete = (rows: ExecutionRow[]) =>
      Promise.all(rows.map((r) => engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'w')));
    const held = complete(first);
    await new Promise((r) => setTimeout(r, 50)); // the first transaction is out, held
    const done = await Promise.race([complete(second), new Promise((r) => setTimeout(() => r('waited'), 5_000))]);
    release();
    expect(done).not.toBe('waited');
    expect((await held).map((r) => r.status)).toEqual(['succeeded', 'succeeded']);
  });

  // A second lane's transaction with the agent would wait for the first's COMMIT, holding the
  // locks of the other agents it took (completion-commit.ts); SQLite has one writer anyway.
  it.skipIf(STORE_KIND === 'sqlite')('a completion of an agent whose transaction is out goes to that lane, not beside it', async () => {
    const [a, b] = [await dirtyAgent(), await dirtyAgent()];
    const [a1, a2, a3] = await claimed(a, 3);
    const [b1] = await claimed(b, 1);
    let release!: () => void;
    let reached!: () => void;
    const locked = new Promise<void>((r) => (reached = r));
    holdBeforeCommit = { until: new Promise<void>((r) => (release = r)), reached };
    const complete = (rows: ExecutionRow[]) =>
      Promise.all(rows.map((r) => engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'w')));
    const held = complete([a1!, a2!]);
    await locked; // a's row is locked by the first transaction, which has not committed
    const later = complete([a3!]);
    const done = await Promise.race([complete([b1!]), new Promise((r) => setTimeout(() => r('waited'), 5_000))]);
    release();
    expect(done).not.toBe('waited');
    expect((await held).map((r) => r.status)).toEqual(['succeeded', 'succeeded']);
    expect((await later).map((r) => r.status)).toEqual(['succeeded']);
    expect(await breakerRecent(a)).toBe(dirtyAfter(3));
  });
});
