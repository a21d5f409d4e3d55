/**
 * The chaos run's composition: every outcome of one traffic agent starts a task on
 * another through a subscription, and groups fan out over the traffic agents with a join, while
 * servers and workers are SIGKILLed. Afterwards every final outcome of the source must have started
 * exactly one task (or recorded why not), no chained task may exist whose source has not ended,
 * and every group must be decided with exactly one join.
 */
import { sql } from 'kysely';
import type { StoreAdapter } from '../src/store/adapter.ts';

export interface ChainResult {
  /** Final outcomes of the source agent (succeeded, failed or cancelled). */
  sources: number;
  /** Tasks the subscription started, and links it recorded as refused. */
  chained: number;
  refused: number;
  /** Final sources with neither a task nor a refusal; sources with more than one task; tasks whose source has not ended. */
  missing: number;
  duplicated: number;
  orphans: number;
  /** Groups created, decided, and decided groups without exactly one join. */
  groups: number;
  decided: number;
  bad_joins: number;
}

export const CHAIN_TARGET = 'chaos-chain';

/** The target agent and the subscription from `source` to it; returns the subscription's id. */
export async function setupChain(
  admin: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>,
  source: string,
  leaseTtl: number,
): Promise<string> {
  const agent = await admin('POST', '/v1/agents', {
    name: CHAIN_TARGET,
    max_parallel: 2,
    max_backlog: 100_000,
    lease_ttl_seconds: leaseTtl,
  });
  if (agent.status !== 201) throw new Error(`create agent ${CHAIN_TARGET}: ${agent.status} ${JSON.stringify(agent.body)}`);
  const sub = await admin('POST', '/v1/subscriptions', {
    source_agent: source,
    target_agent: CHAIN_TARGET,
    on: 'any',
    message: 'follow up {{source.id}} ({{source.status}})',
  });
  if (sub.status !== 201) throw new Error(`create subscription: ${sub.status} ${JSON.stringify(sub.body)}`);
  return sub.body.id as string;
}

/** `count` groups of three members over `agents`, each joined on the chain target; returns how many were created. */
export async function createGroups(
  admin: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>,
  agents: string[],
  count: number,
): Promise<number> {
  let created = 0;
  for (let g = 0; g < count; g++) {
    const r = await admin('POST', '/v1/groups', {
      members: [0, 1, 2].map((i) => ({ agent: agents[(g + i) % agents.length]!, message: `group ${g} member ${i}` })),
      join: { agent: CHAIN_TARGET, message: 'join {{group.id}}: {{group.succeeded}} succeeded' },
    });
    if (r.status !== 201) throw new Error(`create group: ${r.status} ${JSON.stringify(r.body)}`);
    created++;
  }
  return created;
}

/** Count, from the database, what the subscription did for the source's final outcomes, and how the groups ended. */
export async function checkChain(store: StoreAdapter, source: string, subscriptionId: string): Promise<ChainResult> {
  const db = store.db;
  const n = (rows: Array<{ n: number | string }>) => Number(rows[0]?.n ?? 0);
  const finals = db
    .selectFrom('executions')
    .select('id')
    .where('agent', '=', source)
    .where('status', 'in', ['succeeded', 'failed', 'cancelled'])
    // A failure followed by a retry is not final: its retry's outcome is the one followed.
    .where((eb) => eb.not(eb.exists(eb.selectFrom('executions as r').select('r.id').whereRef('r.retry_of', '=', 'executions.id'))));
  const sources = n(
    await db
      .selectFrom(finals.as('f'))
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .execute(),
  );
  const chained = n(
    await db
      .selectFrom('executions')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('subscription_id', '=', subscriptionId)
      .execute(),
  );
  const refused = n(
    await db
      .selectFrom('chain_links')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('subscription_id', '=', subscriptionId)
      .where('refused', 'is not', null)
      .execute(),
  );
  const missing = n(
    await db
      .selectFrom(finals.as('f'))
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where((eb) =>
        eb.not(
          eb.or([
            eb.exists(
              eb
                .selectFrom('executions as c')
                .select('c.id')
                .whereRef('c.caused_by', '=', 'f.id')
                .where('c.subscription_id', '=', subscriptionId),
            ),
            eb.exists(
              eb
                .selectFrom('chain_links as l')
                .select('l.source_id')
                .whereRef('l.source_id', '=', 'f.id')
                .where('l.subscription_id', '=', subscriptionId)
                .where('l.refused', 'is not', null),
            ),
          ]),
        ),
      )
      .execute(),
  );
  const duplicated = n(
    await db
      .selectFrom(
        db
          .selectFrom('executions')
          .select('caused_by')
          .where('subscription_id', '=', subscriptionId)
          .groupBy('caused_by')
          .having(sql`count(*)`, '>', 1)
          .as('d'),
      )
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .execute(),
  );
  const orphans = n(
    await db
      .selectFrom('executions as c')
      .leftJoin('executions as s', 's.id', 'c.caused_by')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('c.subscription_id', '=', subscriptionId)
      .where((eb) => eb.or([eb('s.id', 'is', null), eb('s.status', 'in', ['queued', 'running'])]))
      .execute(),
  );
  const groups = await db.selectFrom('execution_groups').select(['id', 'status', 'join_execution_id']).execute();
  const joins = await db
    .selectFrom('executions')
    .select(['group_id', (eb) => eb.fn.countAll<number>().as('n')])
    .where('group_id', 'is not', null)
    .where('group_index', 'is', null)
    .where('retry_number', '=', 0)
    .groupBy('group_id')
    .execute();
  const joinsOf = new Map(joins.map((j) => [j.group_id, Number(j.n)]));
  const decided = groups.filter((g) => g.status !== 'running');
  const badJoins = decided.filter((g) => g.join_execution_id === null || joinsOf.get(g.id) !== 1).length;
  return { sources, chained, refused, missing, duplicated, orphans, groups: groups.length, decided: decided.length, bad_joins: badJoins };
}
