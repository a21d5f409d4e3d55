/**
 * A keyed submit (no debounce, no singleton) in one statement on PostgreSQL: its fairness round is
 * taken in the submit's own call, under the same new-work turn, by the function every PostgreSQL
 * path takes rounds with (StoreAdapter.keyRounds). Counted on the statements the engine sends (a
 * recording Kysely plugin); on SQLite the same expectations hold for its transaction.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/engine/engine.ts';
import { agentMaker } from '../helpers/agents.ts';
import { manualClock } from '../helpers/clock.ts';
import { countingStore, noneSent } from '../helpers/counting-store.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
const clock = manualClock();
const sent = noneSent();

const newAgent = agentMaker(() => engine, 'keyed', { max_parallel: 5, max_backlog: 100, key_max_parallel: 1 });
const pg = STORE_KIND === 'postgres';

const rounds = async (agent: string) =>
  (
    await ts.store.db
      .selectFrom('executions')
      .select(['message', 'flow_key', 'fair_round'])
      .where('agent', '=', agent)
      .orderBy('created_at')
      .orderBy('message')
      .execute()
  ).map((r) => `${r.message}:${r.flow_key ?? '-'}:${r.fair_round}`);

const lastRounds = async (agent: string) =>
  Object.fromEntries(
    (await ts.store.db.selectFrom('flow_keys').select(['flow_key', 'last_round']).where('agent', '=', agent).execute()).map((r) => [
      r.flow_key,
      Number(r.last_round),
    ]),
  );

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: countingStore(ts.store, sent), clock, nodeId: 'keyed-submit' });
});
afterAll(async () => {
  engine.close();
  await ts.cleanup();
});

describe(`a keyed submit (${STORE_KIND})`, () => {
  it('is one statement on PostgreSQL, and takes the round the transaction path takes', async () => {
    const alone = await newAgent();
    const inTx = await newAgent();
    // The same submits on both agents: one alone, one kept in its transaction by a no-op follow-up.
    const plan: Array<[string, string | null]> = [
      ['a1', 'k1'],
      ['a2', 'k1'],
      ['a3', 'k1'],
      ['p', null],
      ['b1', 'k2'],
    ];
    for (const [message, key] of plan) {
      sent.statements = 0;
      await engine.submit(alone, { message, key }, 'test');
      if (pg) expect(sent.statements).toBe(1);
      await engine.submit(inTx, { message, key }, 'test', async () => {});
      clock.advance(1);
    }
    // A flood on k1 spreads over rounds 0, 1, 2; k2's first task joins at the round being admitted (0).
    expect(await rounds(alone)).toEqual(['a1:k1:0', 'a2:k1:1', 'a3:k1:2', 'p:-:0', 'b1:k2:0']);
    expect(await rounds(inTx)).toEqual(await rounds(alone));
    expect(await lastRounds(alone)).toEqual({ k1: 2, k2: 0 });
    expect(await lastRounds(inTx)).toEqual(await lastRounds(alone));
    // Admitting raises admit_round: a new key then starts at the round admitted.
    for (const agent of [alone, inTx]) {
      const got = await engine.claim(agent, { owner: 'w', max: 5 });
      expect(got.map((r) => r.message).sort()).toEqual(['a1', 'b1', 'p']);
      await engine.claim(agent, { owner: 'w', max: 5 });
      await engine.submit(agent, { message: 'c1', key: 'k3' }, 'test');
    }
    expect((await rounds(alone)).at(-1)).toBe('c1:k3:0');
    expect(await rounds(inTx)).toEqual(await rounds(alone));
  });

  it('refused for a full backlog takes no round, on either path', async () => {
    for (const follow of [undefined, async () => {}]) {
      const agent = await newAgent({ max_backlog: 1 });
      await engine.submit(agent, { message: 'x', key: 'k' }, 'test', follow);
      await expect(engine.submit(agent, { message: 'y', key: 'k' }, 'test', follow)).rejects.toMatchObject({ code: 'backlog_full' });
      await expect(engine.submit(agent, { message: 'z', key: 'other' }, 'test', follow)).rejects.toMatchObject({ code: 'backlog_full' });
      expect(await lastRounds(agent)).toEqual({ k: 0 });
    }
  });

  it('asked for together: one call on PostgreSQL, each key its rounds in the order asked, refusals told why', async () => {
    const agent = await newAgent({ max_backlog: 4 });
    const asked: Array<[string, string]> = [
      ['m1', 'k1'],
      ['m2', 'k2'],
      ['m3', 'k1'],
      ['m4', 'k1'],
      ['m5', 'k2'], // past the backlog: refused, takes no round
    ];
    sent.statements = 0;
    const out = await Promise.allSettled(asked.map(([message, key]) => engine.submit(agent, { message, key }, 'test')));
    expect(out.map((o) => o.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'rejected']);
    expect(out[4]).toMatchObject({ reason: { code: 'backlog_full' } });
    // PostgreSQL: the call, and the refusal's audit row (the refused submit, made alone to say why, fails).
    if (pg) expect(sent.statements).toBe(2);
    expect((await rounds(agent)).sort()).toEqual(['m1:k1:0', 'm2:k2:0', 'm3:k1:1', 'm4:k1:2']);
    expect(await lastRounds(agent)).toEqual({ k1: 2, k2: 0 });
  });

  it.runIf(pg)('the forms without a key still submit, for processes of the version before', async () => {
    const agent = await newAgent();
    const at = clock();
    await sql`SELECT id FROM baton_submit('old-1', ${agent}, 'api', '{}', 'm', 'null', 0, NULL::bigint, NULL, NULL, ${at}::bigint,
      'test', NULL)`.execute(ts.store.db);
    await sql`SELECT id FROM baton_submit_many(ARRAY['old-2'], ARRAY[${agent}], ARRAY['api'], ARRAY['{}'], ARRAY['m'],
      ARRAY['null'], ARRAY[0], ARRAY[NULL::bigint], ARRAY[NULL::text], ARRAY[NULL::text], ARRAY[${at}::bigint], ARRAY['test'],
      ARRAY[NULL::text])`.execute(ts.store.db);
    expect(await rounds(agent)).toEqual(['m:-:0', 'm:-:0']);
  });
});
