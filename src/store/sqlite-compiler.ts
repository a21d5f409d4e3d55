import { SqliteQueryCompiler, type LimitNode, type OffsetNode, type OperationNode } from 'kysely';

/**
 * Kysely's SQLite compiler, with `LIMIT n` and `OFFSET n` written into the SQL text when n is a
 * whole number, instead of bound as `LIMIT ?`.
 *
 * SQLite's planner reads a bound LIMIT's value (for ORDER BY … LIMIT), and a statement whose plan
 * read a bound value is prepared again every time it runs with a new binding — which with
 * better-sqlite3 is every run: the claim's candidate read cost several times as much with
 * `LIMIT ?` as with a literal. The values are integers from the code or from a validated
 * `limit` parameter, so each statement has a handful of texts, each prepared once (the store keeps
 * them prepared). The same holds for a bound term on a column that a partial index's WHERE names
 * (see engine/status-sql.ts): those are written as literals where they are built.
 */
export class SqliteLiteralLimitCompiler extends SqliteQueryCompiler {
  protected override visitLimit(node: LimitNode): void {
    if (!this.inline('limit ', node.limit)) super.visitLimit(node);
  }

  protected override visitOffset(node: OffsetNode): void {
    if (!this.inline('offset ', node.offset)) super.visitOffset(node);
  }

  private inline(keyword: string, value: OperationNode): boolean {
    if (value.kind !== 'ValueNode') return false;
    const n = (value as OperationNode & { value: unknown }).value;
    if (typeof n !== 'number' || !Number.isSafeInteger(n)) return false;
    this.append(`${keyword}${n}`);
    return true;
  }
}
