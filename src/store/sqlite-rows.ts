import type Database from 'better-sqlite3';
import type { SqliteStatement } from 'kysely';

type MakeRow = (r: unknown[]) => Record<string, unknown>;

/**
 * A statement whose rows better-sqlite3 returns as arrays, made into objects by a function
 * compiled for its columns. better-sqlite3 builds each row object by setting its properties one
 * by one: a claim's, a completion's or a submit's `RETURNING *` (every column) cost about twice
 * what it costs as arrays. An object
 * literal of fixed keys is built in one go, and every row of the statement shares one hidden
 * class. The objects are the same as better-sqlite3's (own properties in column order; a repeated
 * name keeps the last value).
 *
 * SQLite prepares a statement again by itself when the schema changed (another process ran
 * `baton migrate`), and a statement that takes its columns from the tables (`SELECT *`, `t.*`,
 * `RETURNING *`) may then return others: after each run of such a statement the connection's
 * schema cookie (`schemaVersion`) is compared with the one the function was made for, and a
 * change makes it again from the columns of the program that just ran. A statement without `*`
 * names each of its columns in its text (by alias or by column), so prepared again it returns the
 * same names in the same order, or fails to prepare where one is gone: it is made once and runs
 * without the check.
 */
export function rowsAsObjects(stmt: Database.Statement, schemaVersion: () => number): SqliteStatement {
  if (!stmt.reader) return stmt;
  const columnNames = () => stmt.columns().map((c) => c.name);
  let made = -1;
  let make: MakeRow | undefined;
  const remake = (version: number): MakeRow | undefined => {
    made = version;
    const names = columnNames();
    // `__proto__` in an object literal sets the prototype, as assigning it does, but only when its
    // value is an object: such rows are made one property at a time, as better-sqlite3 makes them.
    if (names.includes('__proto__')) return undefined;
    const body = names.map((n, i) => `${JSON.stringify(n)}: r[${i}]`).join(', ');
    return new Function('r', `return { ${body} };`) as MakeRow;
  };
  make = remake(schemaVersion());
  const fromTables = stmt.source.includes('*');
  const rows = stmt.raw(true);
  const toObjects = (arrays: unknown[][]): Record<string, unknown>[] => {
    if (fromTables) {
      const version = schemaVersion();
      if (version !== made) make = remake(version);
    }
    const out = new Array<Record<string, unknown>>(arrays.length);
    if (make) for (let i = 0; i < arrays.length; i++) out[i] = make(arrays[i]!);
    else {
      const keys = columnNames();
      for (let i = 0; i < arrays.length; i++) {
        // Assigned one by one, as better-sqlite3 does (so `__proto__` behaves as it does there).
        const o: Record<string, unknown> = {};
        for (let j = 0; j < keys.length; j++) o[keys[j]!] = arrays[i]![j];
        out[i] = o;
      }
    }
    return out;
  };
  return {
    reader: true,
    all: (parameters) => toObjects(rows.all(parameters) as unknown[][]),
    run: (parameters) => rows.run(parameters),
    *iterate(parameters) {
      for (const r of rows.iterate(parameters) as IterableIterator<unknown[]>) yield toObjects([r])[0];
    },
  };
}
