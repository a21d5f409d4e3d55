import { sql, type Kysely } from 'kysely';
import { EXECUTION_PAGE, PREVIEW_CHARS, USAGE_LIST_CHARS } from '../domain/lists.ts';
import { EXECUTION_STATES, type ExecutionStatus } from '../domain/states.ts';
import type { DB } from '../store/schema.ts';
import { statusIs } from './status-sql.ts';

export { EXECUTION_PAGE, PREVIEW_CHARS, USAGE_LIST_CHARS };

export interface ExecutionFilter {
  agent?: string;
  status?: ExecutionStatus[];
  schedule_id?: string;
  created_after?: number;
  created_before?: number;
  /** Default EXECUTION_PAGE.default, at most EXECUTION_PAGE.max. */
  limit?: number;
  /** Keyset cursor from a previous page. */
  before?: { created_at: number; id: string };
}

/** The first PREVIEW_CHARS + 1 characters, cut in SQL so a big body never reaches Node: one more than shown says whether it was cut. */
export const previewHead = (column: string) => sql<string>`substr(${sql.ref(column)}, 1, ${sql.lit(PREVIEW_CHARS + 1)})`;

/** Usage as stored when it is small (a few token counts), else null: a worker may send more. */
const smallUsage = sql<string | null>`case when length(${sql.ref('usage')}) <= ${sql.lit(USAGE_LIST_CHARS)} then ${sql.ref('usage')} end`;

/**
 * Newest first. Each filter shape seeks an index made for it: status →
 * executions_status_recent; agent and status → executions_agent_status_recent; schedule →
 * executions_schedule_recent, with status → executions_schedule_status_recent. The cursor and
 * since/until are a range on created_at inside that index. Several statuses are one seek per
 * status, each limited, merged by the database (UNION ALL, then the page's order): `status IN
 * (…)` would read every row of those statuses and sort them, and the database's collation, not
 * JavaScript's, must order ids that share a created_at, or cursors would skip rows. No status
 * (all executions, or one agent's): where the store has them (`createdOrderIndexes`, PostgreSQL)
 * executions_recent / executions_agent_recent; elsewhere (SQLite) every status so, one seek per
 * status into the same two status indexes: SQLite has no such indexes, which cost every insert and
 * every pruned row an index entry each. (On PostgreSQL one seek per status costs a page noticeably
 * more, planning included, on a long history.)
 */
export async function listExecutions(db: Kysely<DB>, f: ExecutionFilter, createdOrderIndexes: boolean) {
  const limit = Math.min(Math.max(1, Math.trunc(f.limit ?? EXECUTION_PAGE.default)), EXECUTION_PAGE.max);
  // No index orders all rows by created_at, no status asked for: every status, one seek each, but
  // under a schedule, whose own index does.
  const wanted = createdOrderIndexes || f.status?.length || f.schedule_id ? (f.status ?? []) : EXECUTION_STATES;
  const statuses = [...new Set(wanted)];
  const seek = (status: ExecutionStatus | undefined) => {
    let q = db
      .selectFrom('executions')
      .select([
        'id',
        'agent',
        'status',
        'attempt',
        'trigger_kind',
        'origin',
        'priority',
        'schedule_id',
        'scheduled_for',
        'run_after',
        'created_at',
        'queued_at',
        'started_at',
        'completed_at',
        'duration_ms',
        'lease_owner',
        'lease_expires_at',
        'heartbeat_at',
        'deadline_at',
        'cancel_requested_at',
        'error_code',
        'retry_of',
        'retry_number',
        'caused_by',
        'subscription_id',
        'chain_depth',
        'group_id',
        'group_index',
        'idempotency_key',
        'flow_key',
      ])
      .select([
        previewHead('message').as('message_head'),
        previewHead('payload').as('payload_head'),
        previewHead('result').as('result_head'),
        previewHead('error_message').as('error_head'),
        smallUsage.as('usage'),
      ]);
    if (f.schedule_id) q = q.where('schedule_id', '=', f.schedule_id);
    if (f.agent) q = q.where('agent', '=', f.agent);
    if (status) q = q.where('status', '=', statusIs(status));
    if (f.created_after !== undefined) q = q.where('created_at', '>=', f.created_after);
    if (f.created_before !== undefined) q = q.where('created_at', '<', f.created_before);
    if (f.before) {
      // `created_at <= c` is the range the index seeks; the OR only breaks ties at c.
      const b = f.before;
      q = q.where('created_at', '<=', b.created_at).where((eb) => eb.or([eb('created_at', '<', b.created_at), eb('id', '<', b.id)]));
    }
    return q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit);
  };
  if (statuses.length <= 1) return seek(statuses[0]).execute();
  const [first, ...rest] = statuses.map((s, i) => db.selectFrom(seek(s).as(`s${i}`)).selectAll());
  let merged = first!;
  for (const q of rest) merged = merged.unionAll(q);
  return merged.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
}

export type ExecutionListRow = Awaited<ReturnType<typeof listExecutions>>[number];
