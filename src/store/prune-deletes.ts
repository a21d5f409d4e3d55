/**
 * The pruner's deletes of executions, one implementation per dialect (StoreAdapter
 * deleteExecutionChains). The pruner (src/retention/prune.ts) chooses the chains and runs the
 * transaction; these remove the rows.
 */
import { sql, type QueryResult } from 'kysely';
import type { ChainMember, ExecutionChain, InOrder, PrunedRows, Tx } from './adapter.ts';

/**
 * Executions per prune batch (one transaction), by store. On SQLite a batch runs on the pruner's own
 * connection in a worker thread, so it holds the one writer but not the event loop, and it
 * commits early, after any chunk of PRUNE_DELETE_CHUNK executions (a few ms), when another caller waits
 * for the store (pruneTransaction's `contended`): a batch is as long as nobody needs the store,
 * up to this many (fewer, longer transactions write each page of the per-agent indexes, and checkpoint it, fewer times).
 * PostgreSQL does the work in its own process and locks only the rows it deletes, but a batch's
 * statement writes WAL about the size of what it removes (over 1 KiB per execution: the first
 * change to a page after a checkpoint logs all of it), and another transaction's commit waits for the
 * flush of every WAL byte before its own: on a long history, batches of 1,000 roughly doubled the
 * p99 of a submit → claim while sweeping against batches of 500, for a somewhat faster sweep
 * (docs/benchmarks.md).
 */
export const PRUNE_BATCH = Object.freeze({ sqlite: 2000, postgres: 500 });

/**
 * Ids per DELETE … IN (…) statement. A SQLite executions batch deletes whole retry chains about
 * this many at a time, so a caller waiting for the store waits for one such chunk at most (a few
 * ms); the pruner's canary phase deletes this many at a time on both stores.
 * (PostgreSQL plans a long IN list as a scan of the whole table, so its executions batch matches one array instead:
 * deleteChainsPostgres.)
 */
export const PRUNE_DELETE_CHUNK = 100;

/** Later retries first: each points at the one before (retry_of), and a row still referenced cannot go first. */
export function laterRetriesFirst(members: readonly ChainMember[]): string[] {
  return [...members].sort((a, b) => Number(b.retry_number) - Number(a.retry_number)).map((m) => m.id);
}

const affected = (r: QueryResult<unknown> | undefined) => Number(r?.numAffectedRows ?? 0);

/**
 * SQLite: whole chains, about PRUNE_DELETE_CHUNK executions at a time; when someone waits for the
 * store, stop after the chunk in hand (the pruner commits what is done and leaves the rest to its
 * next batch: the wait is one chunk).
 */
export async function deleteChainsSqlite(
  tx: Tx,
  chains: readonly ExecutionChain[],
  contended: () => boolean,
  inOrder: InOrder,
): Promise<PrunedRows & { chains: number }> {
  const c: PrunedRows = { executions: 0, events: 0, logs: 0, keys: 0 };
  let i = 0;
  while (i < chains.length) {
    if (i > 0 && contended()) break;
    const part: ChainMember[] = [];
    while (i < chains.length && (part.length === 0 || part.length + chains[i]!.length <= PRUNE_DELETE_CHUNK)) part.push(...chains[i++]!);
    // The ids as one JSON parameter: each statement's text is the same whatever the chunk's size
    // (prepared once on the pruner's thread), and Kysely compiles one value, not hundreds.
    const ids = sql<string>`(SELECT value FROM json_each(${JSON.stringify(laterRetriesFirst(part))}))`;
    // The chunk's statements go to the pruner's thread together and run there one after another,
    // in this order: one round trip per chunk instead of one per statement. The owned rows go
    // before their execution. Only executions that logged have a head (appendLogs writes it with
    // the first line), and few do: their lines are found through the heads.
    const [logs, , events, keys, , executions] = await inOrder([
      tx
        .deleteFrom('execution_logs')
        .where('execution_id', 'in', (eb) => eb.selectFrom('execution_log_heads').select('execution_id').where('execution_id', 'in', ids))
        .compile(),
      tx.deleteFrom('execution_log_heads').where('execution_id', 'in', ids).compile(),
      tx.deleteFrom('execution_events').where('execution_id', 'in', ids).compile(),
      tx.deleteFrom('idempotency_keys').where('execution_id', 'in', ids).compile(),
      // What a pruned source started (its primary key leads with source_id). A chained task kept
      // longer keeps its caused_by, pointing at a source no longer stored.
      tx.deleteFrom('chain_links').where('source_id', 'in', ids).compile(),
      tx.deleteFrom('executions').where('id', 'in', ids).compile(),
    ]);
    c.logs += affected(logs);
    c.events += affected(events);
    c.keys += affected(keys);
    c.executions += affected(executions);
  }
  if (c.executions > 0)
    await tx
      .updateTable('retention_state')
      .set((eb) => ({ total_executions: eb('total_executions', '+', c.executions) }))
      .where('id', '=', 'retention')
      .execute();
  return { ...c, chains: i };
}

/**
 * PostgreSQL: every chain in one statement. Each table's DELETE is a data-modifying CTE over the
 * same id list, so a batch is one round trip and one plan instead of five statements per hundred
 * ids (each with its own parse/bind/execute and the history guard's statement trigger). The
 * foreign keys (events, logs, heads → executions; retry_of) are NO ACTION: checked at the end of
 * the statement, when the rows that referenced a deleted execution are gone with it. The ids are
 * one array value, matched with `= ANY(…)`: an index scan of each table whatever the planner
 * thinks of the array's length (`IN (…)` with a thousand constants made it scan whole tables, and
 * a join with the unnested ids chose sequential scans on a 30,000-row history in
 * test/cost/plans.test.ts). Events, three or more per execution, are found id by id through their
 * index (a LATERAL probe per id; OFFSET 0 keeps the planner from making it a join) and deleted by
 * row address: a batch is a sizeable share of a small events table, where the planner would
 * otherwise scan all of it.
 */
export async function deleteChainsPostgres(tx: Tx, chains: readonly ExecutionChain[]): Promise<PrunedRows & { chains: number }> {
  const ids = laterRetriesFirst(chains.flat());
  if (ids.length === 0) return { executions: 0, events: 0, logs: 0, keys: 0, chains: chains.length };
  // Only executions that logged have a head (appendLogs writes it with the first line): their
  // lines are deleted by the heads found, not by every id.
  const list = sql`${ids}::text[]`;
  const r = await sql<PrunedRows>`
    WITH heads AS (DELETE FROM execution_log_heads h WHERE h.execution_id = ANY(${list}) RETURNING h.execution_id),
    logs AS (DELETE FROM execution_logs l WHERE l.execution_id = ANY(ARRAY(SELECT execution_id FROM heads)) RETURNING 1),
    events AS (
      DELETE FROM execution_events e WHERE e.ctid = ANY(ARRAY(
        SELECT ev.ctid FROM unnest(${list}) AS i(id) CROSS JOIN LATERAL (SELECT ctid FROM execution_events WHERE execution_id = i.id OFFSET 0) AS ev
      )) RETURNING 1
    ),
    keys AS (DELETE FROM idempotency_keys k WHERE k.execution_id = ANY(${list}) RETURNING 1),
    links AS (DELETE FROM chain_links c WHERE c.source_id = ANY(${list})),
    gone AS (DELETE FROM executions x WHERE x.id = ANY(${list}) RETURNING 1),
    n AS (SELECT count(*)::int AS n FROM gone),
    totals AS (
      UPDATE retention_state SET total_executions = total_executions + n.n FROM n WHERE retention_state.id = 'retention' AND n.n > 0
    )
    SELECT n.n AS executions,
      (SELECT count(*)::int FROM events) AS events,
      (SELECT count(*)::int FROM logs) AS logs,
      (SELECT count(*)::int FROM keys) AS keys
    FROM n`.execute(tx);
  const row = r.rows[0]!;
  return { executions: row.executions, events: row.events, logs: row.logs, keys: row.keys, chains: chains.length };
}
