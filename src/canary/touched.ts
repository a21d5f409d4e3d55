import { sql } from 'kysely';
import { SECRET_PATTERNS } from '../domain/secrets.ts';
import type { Tx } from '../store/adapter.ts';
import { inScope } from './sql.ts';
import { idChunks, type CheckContext, type RowScope, type SharedRows, type Touched } from './types.ts';

/** Every column a client supplies: the task (payload, message) and the outcome (result, error, usage). */
export type ClientField = 'payload' | 'message' | 'result' | 'error_code' | 'error_message' | 'usage';
export const CLIENT_FIELDS: readonly ClientField[] = ['payload', 'message', 'result', 'error_code', 'error_message', 'usage'];

/** The database prefilter: `column` contains any secret pattern's prefix (src/domain/secrets.ts, shared with the redactor). */
const LIKES = SECRET_PATTERNS.flatMap((p) => p.like);
export const anyLike = (column: string) =>
  sql<boolean>`(${sql.join(
    LIKES.map((like) => sql`${sql.ref(column)} LIKE ${like}`),
    sql` OR `,
  )})`;

const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

/** One read of the executions in `scope`: primary-key seeks (or a keyset range), no other condition. */
async function select(tx: Tx, scope: RowScope): Promise<Touched[]> {
  const rows = await tx
    .selectFrom('executions')
    .select(['id', 'agent', 'status', 'queued_at', 'started_at', 'completed_at', 'duration_ms', 'retry_of', 'group_id', 'caused_by'])
    .select(sql<number>`CASE WHEN ${sql.join(CLIENT_FIELDS.map(anyLike), sql` OR `)} THEN 1 ELSE 0 END`.as('suspect'))
    .where((eb) => inScope(eb, 'id', scope))
    .execute();
  return rows.map((r) => ({
    ...r,
    queued_at: num(r.queued_at),
    started_at: num(r.started_at),
    completed_at: num(r.completed_at),
    duration_ms: num(r.duration_ms),
    suspect: Number(r.suspect) === 1,
  }));
}

/** Executions kept at most; past it the cache starts over (a row read again costs a read, never a wrong answer). */
export const TOUCHED_KEPT = 20_000;

/**
 * The rows of the executions a cycle judges, read once inside its snapshot for every invariant
 * that judges them: seven invariants judge the same ids, and a read each would descend
 * executions_pkey seven times an execution, a descent whose depth grows with history. Rows do not
 * change within the snapshot, so every invariant sees what its own read would have returned.
 * A full check's keyset range is kept until the next range is asked for.
 */
export class TouchedRows implements SharedRows {
  /** null: no such execution in the snapshot. */
  private readonly byId = new Map<string, Touched | null>();
  private range?: { after: string | null; through: string; rows: Touched[] };

  async read(tx: Tx, scope: RowScope): Promise<Touched[]> {
    if (!('ids' in scope)) {
      if (this.range?.after !== scope.after || this.range.through !== scope.through)
        this.range = { after: scope.after, through: scope.through, rows: await select(tx, scope) };
      return this.range.rows;
    }
    const ids = [...new Set(scope.ids)];
    let missing = ids.filter((id) => !this.byId.has(id));
    if (this.byId.size + missing.length > TOUCHED_KEPT) {
      this.byId.clear();
      missing = ids;
    }
    for (const part of idChunks(missing)) {
      for (const id of part) this.byId.set(id, null);
      for (const r of await select(tx, { ids: part })) this.byId.set(r.id, r);
    }
    return ids.flatMap((id) => {
      const r = this.byId.get(id);
      return r ? [r] : [];
    });
  }
}

/** The executions in `scope`, through the cycle's shared rows (CheckContext.touched) when it has them. */
export const touchedRows = (tx: Tx, scope: RowScope, ctx: Pick<CheckContext, 'touched'>): Promise<Touched[]> =>
  (ctx.touched ?? new TouchedRows()).read(tx, scope);
