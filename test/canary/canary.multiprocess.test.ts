/**
 * The canary timer across real processes: two `baton up` on one PostgreSQL database, one of
 * them holding the canary lease; SIGKILL the holder and the other takes the timer over, so the
 * canary never goes stale because one process died.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BatonClient } from '../../src/client.ts';
import { writeRow } from '../helpers/canary.ts';
import { describeMultiProcess, openTestStore, type TestStore } from '../helpers/store.ts';
import { freePort, startBatonUp, type Child } from '../helpers/process.ts';

let ts: TestStore;
const children: Child[] = [];

beforeAll(async () => {
  ts = await openTestStore({ poolMax: 3 });
});
afterAll(async () => {
  for (const c of children) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
  await Promise.all(children.map((c) => c.exited));
  await ts.cleanup();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const state = () => ts.store.db.selectFrom('canary_state').selectAll().where('id', '=', 'canary').executeTakeFirstOrThrow();

/** Poll until `check` returns a value (not undefined), or fail after `ms`. */
async function until<T>(what: string, ms: number, check: () => Promise<T | undefined>): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

describeMultiProcess('canary timer lease across processes (PostgreSQL)', () => {
  it('one process runs the cycles; after it is SIGKILLed the other takes over', async () => {
    const env = {
      BATON_DATABASE_URL: ts.location.databaseUrl!,
      BATON_PG_SCHEMA: ts.location.schema!,
      BATON_DATA_DIR: ts.location.dataDir,
      BATON_CANARY_INTERVAL_MS: '2000',
    };
    const a = await startBatonUp(env, await freePort());
    children.push(a);
    const b = await startBatonUp(env, await freePort());
    children.push(b);
    const byPid = new Map([
      [a.proc.pid!, a],
      [b.proc.pid!, b],
    ]);
    const holderOf = (owner: string | null) => (owner ? byPid.get(Number(owner.split(':').pop())) : undefined);

    const first = await until('a lease holder', 30_000, async () => holderOf((await state()).lease_owner));
    // While it lives, nobody else takes the timer, and cycles keep completing.
    const cyclesBefore = Number((await state()).cycles);
    for (let i = 0; i < 3; i++) {
      await sleep(700);
      expect(holderOf((await state()).lease_owner)).toBe(first);
    }
    await until('more cycles', 30_000, async () => (Number((await state()).cycles) > cyclesBefore ? true : undefined));

    // The checkpoint the holder stored moves on with whoever holds the lease next.
    const checkpoint = async () =>
      Number(
        (await ts.store.db.selectFrom('canary_checkpoints').select('event_id').where('invariant', '=', 'E-02').executeTakeFirst())
          ?.event_id ?? -1,
      );
    const stored = await until('a stored checkpoint', 30_000, async () => ((await checkpoint()) >= 0 ? checkpoint() : undefined));

    first.proc.kill('SIGKILL');
    await first.exited;
    const survivor = first === a ? b : a;
    // A violation written after the dead holder's checkpoint is judged by the survivor's next cycle.
    const row = await writeRow(ts.store, Date.now(), {
      agent: 'mp-canary',
      status: 'succeeded',
      started_at: Date.now(),
      completed_at: Date.now(),
      duration_ms: 0,
    });
    const bad = await ts.store.db
      .insertInto('execution_events')
      .values({
        execution_id: row.id,
        agent: 'mp-canary',
        from_status: 'succeeded',
        to_status: 'queued',
        at: Date.now(),
        actor: 'bug',
        reason: null,
        attempt: 1,
        seats_in_use: null,
        seat_cap: null,
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    await until('the survivor to hold the lease', 30_000, async () =>
      holderOf((await state()).lease_owner) === survivor ? true : undefined,
    );
    const after = Number((await state()).cycles);
    await until('a cycle by the survivor', 30_000, async () => (Number((await state()).cycles) > after ? true : undefined));
    await until('the survivor to find the violation', 30_000, async () =>
      (await ts.store.db
        .selectFrom('canary_violations')
        .select('id')
        .where('invariant', '=', 'E-02')
        .where('subject', '=', row.id)
        .executeTakeFirst())
        ? true
        : undefined,
    );
    expect(await checkpoint()).toBeGreaterThanOrEqual(stored);
    expect(Number(bad.id)).toBeGreaterThan(stored);

    const key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
    const status = await new BatonClient({ server: survivor.url, key }).canaryStatus();
    expect(status.status).toBe('violated');
    expect(status.open.map((v) => [v.invariant, v.subject])).toEqual([['E-02', row.id]]);
    expect(status.lease_owner).toContain(`:${survivor.proc.pid}`);
  });
});
