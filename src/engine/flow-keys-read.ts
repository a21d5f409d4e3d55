import { sql, type Kysely } from 'kysely';
import { keyCap, keyLimits, type KeyState } from '../domain/flow.ts';
import { NotFound } from '../domain/errors.ts';
import { nextStartAt, throttleAdmits } from '../domain/throttle.ts';
import type { DB } from '../store/schema.ts';
import { LIVE_STATUSES } from './status-sql.ts';

/** Keys per page of the live keys read. */
export const LIVE_KEYS_PAGE = { default: 100, max: 500 } as const;

/**
 * An agent's live keys (a queued or running task), in key order after `after`, at most `limit`:
 * seats in use, queue depth, cap and throttle state. Walks executions_key_live from the cursor
 * (the live rows of the page's keys), then seeks their flow_keys rows.
 */
export async function liveKeys(
  db: Kysely<DB>,
  agent: string,
  opts: { limit?: number; after?: string; now: number },
): Promise<{ keys: KeyState[]; next: string | null }> {
  const row = await db
    .selectFrom('agents')
    .select(['key_max_parallel', 'key_overrides', 'key_throttle'])
    .where('name', '=', agent)
    .executeTakeFirst();
  if (!row) throw new NotFound('agent', agent);
  const limit = Math.min(Math.max(1, opts.limit ?? LIVE_KEYS_PAGE.default), LIVE_KEYS_PAGE.max);
  let q = db
    .selectFrom('executions')
    .select('flow_key')
    .select(sql<number>`sum(case when status = 'running' then 1 else 0 end)`.as('running'))
    .select(sql<number>`sum(case when status = 'queued' then 1 else 0 end)`.as('queued'))
    .where('agent', '=', agent)
    .where('flow_key', 'is not', null)
    .where('status', 'in', LIVE_STATUSES);
  if (opts.after !== undefined) q = q.where('flow_key', '>', opts.after);
  const rows = await q.groupBy('flow_key').orderBy('flow_key').limit(limit).execute();
  const limits = keyLimits(row);
  const t = limits?.throttle ?? null;
  const tats = new Map<string, number | null>();
  if (t && rows.length > 0) {
    const states = await db
      .selectFrom('flow_keys')
      .select(['flow_key', 'throttle_tat'])
      .where('agent', '=', agent)
      .where(
        'flow_key',
        'in',
        rows.map((r) => r.flow_key!),
      )
      .execute();
    for (const s of states) tats.set(s.flow_key, s.throttle_tat === null ? null : Number(s.throttle_tat));
  }
  const keys = rows.map((r) => {
    const tat = tats.get(r.flow_key!) ?? null;
    return {
      key: r.flow_key!,
      running: Number(r.running),
      queued: Number(r.queued),
      max_parallel: keyCap(limits, r.flow_key!),
      throttled_until: t && !throttleAdmits(t, tat, opts.now) ? nextStartAt(t, tat, opts.now) : null,
    };
  });
  return { keys, next: rows.length === limit ? rows[rows.length - 1]!.flow_key : null };
}

/**
 * How many keys of each agent are live, for the metrics (one gauge per agent: no label per key):
 * per agent, a seek into executions_key_live.
 */
export async function liveKeyCounts(db: Kysely<DB>): Promise<Map<string, number>> {
  const rows = await db
    .selectFrom('agents as a')
    .select('a.name')
    .select((eb) =>
      eb
        .selectFrom('executions as e')
        .select(sql<number>`count(distinct e.flow_key)`.as('n'))
        .whereRef('e.agent', '=', 'a.name')
        .where('e.flow_key', 'is not', null)
        .where('e.status', 'in', LIVE_STATUSES)
        .as('n'),
    )
    .execute();
  return new Map(rows.map((r) => [r.name, Number(r.n ?? 0)]));
}
