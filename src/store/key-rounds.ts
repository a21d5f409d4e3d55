import { sql } from 'kysely';
import type { KeyRoundsRequest, Tx } from './adapter.ts';
import { preparedQuery } from './prepared-query.ts';

/**
 * PostgreSQL: the function `baton_key_rounds` (its migration), which its one-call submit
 * (baton_submit_many) calls too, so every PostgreSQL path takes rounds by one text.
 */
export async function postgresKeyRounds(tx: Tx, r: KeyRoundsRequest): Promise<number | null> {
  const { rows } = await sql<{ last_round: string | number | null }>`SELECT baton_key_rounds(${r.agent}, ${r.key}, ${r.n}::int,
    ${r.room}) AS last_round`.execute(tx);
  const last = rows[0]?.last_round;
  return last == null ? null : Number(last);
}

/**
 * SQLite: the same statement as baton_key_rounds, which SQLite has no functions to hold (the
 * differential test runs both against each other). Built once (preparedQuery). `WHERE` also keeps
 * SQLite's parser from reading the upsert's ON as a join's.
 */
const sqliteRounds = preparedQuery((tx: Tx, p: { agent: string; key: string; n: number; room: number }) =>
  tx
    .insertInto('flow_keys')
    .columns(['agent', 'flow_key', 'last_round'])
    .expression((eb) =>
      eb
        .selectFrom('agents as a')
        .innerJoin('agent_backlog as b', 'b.agent', 'a.name')
        .select([
          sql<string>`a.name`.as('agent'),
          sql<string>`${p.key}`.as('flow_key'),
          sql<number>`a.admit_round + ${p.n} - 1`.as('last_round'),
        ])
        .where('a.name', '=', p.agent)
        .where(sql<boolean>`(${p.room} = 0 OR b.queued_in - a.queued_out + ${p.n} <= a.max_backlog)`),
    )
    .onConflict((oc) =>
      oc.columns(['agent', 'flow_key']).doUpdateSet({
        // CASE rather than max: the two dialects name that function differently.
        last_round: sql<number>`CASE WHEN flow_keys.last_round + ${p.n} > excluded.last_round
          THEN flow_keys.last_round + ${p.n} ELSE excluded.last_round END`,
      }),
    )
    .returning('last_round'),
);

export async function sqliteKeyRounds(tx: Tx, r: KeyRoundsRequest): Promise<number | null> {
  const [row] = await sqliteRounds(tx, { agent: r.agent, key: r.key, n: r.n, room: r.room ? 1 : 0 });
  return row ? Number(row.last_round) : null;
}
