import { sql, type Expression, type ExpressionBuilder, type RawBuilder, type SqlBool } from 'kysely';
import type { ExecutionStatus } from '../domain/states.ts';
import { idChunks, type Finding, type RowScope } from './types.ts';

/**
 * A status as an SQL literal, never a bound parameter. SQLite plans a statement before it sees
 * the values bound to it, so `status = ?` cannot use a partial index (`WHERE status = 'running'`)
 * and walks history instead; `status = 'running'` seeks the partial index. PostgreSQL plans
 * either way, so the literal costs nothing there.
 */
export function status(s: ExecutionStatus): RawBuilder<ExecutionStatus> {
  return sql.lit(s) as RawBuilder<ExecutionStatus>;
}

/** Statuses as a literal list, for `IN (...)`. */
export function statuses(list: readonly ExecutionStatus[]): RawBuilder<ExecutionStatus> {
  return sql`(${sql.join(list.map((s) => sql.lit(s)))})` as RawBuilder<ExecutionStatus>;
}

/** `column` within the scope: an id list (a primary-key seek per id) or a keyset range of ids. */
export function inScope(eb: ExpressionBuilder<any, any>, column: string, scope: RowScope): Expression<SqlBool> {
  if ('ids' in scope) return eb(eb.ref(column), 'in', scope.ids as string[]);
  if (scope.after === null) return eb(eb.ref(column), '<=', scope.through);
  return eb.and([eb(eb.ref(column), '>', scope.after), eb(eb.ref(column), '<=', scope.through)]);
}

/** Run a row check over a scope, splitting a long id list into IN lists of bounded length. */
export async function forScope(scope: RowScope, fn: (part: RowScope) => Promise<Finding[]>): Promise<Finding[]> {
  if (!('ids' in scope)) return fn(scope);
  const out: Finding[] = [];
  for (const ids of idChunks(scope.ids)) out.push(...(await fn({ ids })));
  return out;
}
