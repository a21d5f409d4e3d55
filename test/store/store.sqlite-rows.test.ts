/**
 * SQLite's main connection reads rows as arrays and makes them into objects with a function
 * compiled per statement (src/store/sqlite-rows.ts). The objects must be exactly what
 * better-sqlite3 itself would return, for every statement shape, and stay right when another
 * connection changes the schema under a statement already prepared (SQLite prepares it again,
 * with other columns). PostgreSQL's driver makes its own rows.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { openSqlite } from '../../src/store/sqlite.ts';
import { rowsAsObjects } from '../../src/store/sqlite-rows.ts';
import { STORE_KIND } from '../helpers/store.ts';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const tempFile = () => {
  const d = mkdtempSync(join(tmpdir(), 'baton-test-'));
  dirs.push(d);
  return join(d, 'rows.sqlite');
};

describe.runIf(STORE_KIND === 'sqlite')('SQLite rows as arrays', () => {
  it('makes the same objects as better-sqlite3, whatever the statement', () => {
    const db = new Database(':memory:');
    db.exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, body BLOB, n REAL, note TEXT);
      INSERT INTO t VALUES (1, 'a', x'00ff', 1.5, NULL), (2, 'b', NULL, -2, 'x'), (3, '"q"', x'', 0, '')`);
    const version = db.prepare('PRAGMA schema_version').pluck();
    const statements = [
      'SELECT * FROM t ORDER BY id',
      'SELECT * FROM t WHERE id = 99',
      'SELECT id, name AS id FROM t ORDER BY id', // a repeated name: the last value wins
      'SELECT name AS "__proto__", id AS "constructor", n AS "a b", note AS "x""y" FROM t ORDER BY id',
      'SELECT count(*) AS n, max(name) FROM t',
      'UPDATE t SET n = n + 1 WHERE id < 3 RETURNING *',
      "INSERT INTO t (name) VALUES ('new') RETURNING id, name",
    ];
    for (const text of statements) {
      const write = !/^SELECT/.test(text);
      if (write) db.exec('SAVEPOINT s');
      const expected = db.prepare(text).all();
      if (write) db.exec('ROLLBACK TO s; RELEASE s');
      if (write) db.exec('SAVEPOINT s');
      const got = rowsAsObjects(db.prepare(text), () => version.get() as number).all([]);
      if (write) db.exec('ROLLBACK TO s; RELEASE s');
      expect(got, text).toStrictEqual(expected);
      for (let i = 0; i < got.length; i++) {
        expect(Object.keys(got[i] as object), text).toEqual(Object.keys(expected[i] as object));
        expect(Object.getPrototypeOf(got[i]), text).toBe(Object.getPrototypeOf(expected[i]));
      }
    }
    const each = [...rowsAsObjects(db.prepare('SELECT * FROM t ORDER BY id'), () => version.get() as number).iterate([])];
    expect(each).toStrictEqual(db.prepare('SELECT * FROM t ORDER BY id').all());
    // The cookie is read after each run only where the columns come from the tables (`*`).
    let reads = 0;
    const counted = () => (reads++, version.get() as number);
    const named = rowsAsObjects(db.prepare('SELECT id, name FROM t ORDER BY id'), counted);
    named.all([]);
    named.all([]);
    expect(reads).toBe(1);
    const starred = rowsAsObjects(db.prepare('SELECT * FROM t ORDER BY id'), counted);
    starred.all([]);
    starred.all([]);
    expect(reads).toBe(4);
    // A statement that returns no rows runs as before.
    const run = rowsAsObjects(db.prepare("UPDATE t SET note = 'y' WHERE id = 1"), () => version.get() as number);
    expect(run.reader).toBe(false);
    expect(Number(run.run([]).changes)).toBe(1);
    db.close();
  });

  it('follows a schema changed by another connection under a prepared statement', async () => {
    const file = tempFile();
    const store = openSqlite(file);
    await store.migrate();
    await sql`CREATE TABLE shapes (id INTEGER PRIMARY KEY, a TEXT, b TEXT)`.execute(store.db);
    await sql`INSERT INTO shapes (a, b) VALUES ('A', 'B')`.execute(store.db);
    const read = () =>
      store.db
        .selectFrom('shapes' as never)
        .selectAll()
        .execute();
    expect(await read()).toEqual([{ id: 1, a: 'A', b: 'B' }]);
    const readNamed = () =>
      store.db
        .selectFrom('shapes' as never)
        .select(['a', 'id'] as never)
        .execute();
    expect(await readNamed()).toEqual([{ a: 'A', id: 1 }]);
    const other = new Database(file);
    try {
      // A column added: the same statement text, one more column.
      other.exec("ALTER TABLE shapes ADD COLUMN c TEXT NOT NULL DEFAULT 'C'");
      expect(await read()).toEqual([{ id: 1, a: 'A', b: 'B', c: 'C' }]);
      // The table rebuilt with as many columns in another order.
      other.exec(`CREATE TABLE shapes_new (c TEXT, b TEXT, id INTEGER PRIMARY KEY, a TEXT);
        INSERT INTO shapes_new (c, b, id, a) SELECT c, b, id, a FROM shapes;
        DROP TABLE shapes; ALTER TABLE shapes_new RENAME TO shapes;`);
      const rows = await read();
      expect(rows).toEqual([{ c: 'C', b: 'B', id: 1, a: 'A' }]);
      expect(Object.keys(rows[0] as object)).toEqual(['c', 'b', 'id', 'a']);
      // A statement naming its columns returns those names in its own order, whatever the table's.
      const named = await readNamed();
      expect(named).toEqual([{ a: 'A', id: 1 }]);
      expect(Object.keys(named[0] as object)).toEqual(['a', 'id']);
      // One whose column is gone fails, rather than return other columns.
      other.exec('ALTER TABLE shapes DROP COLUMN a');
      await expect(readNamed()).rejects.toThrow(/no such column/);
    } finally {
      other.close();
      await store.close();
    }
  });

  it('reads the schema cookie once per group commit, and follows a change made between groups', async () => {
    const file = tempFile();
    const store = openSqlite(file);
    await store.migrate();
    await sql`CREATE TABLE shapes (id INTEGER PRIMARY KEY, a TEXT)`.execute(store.db);
    await sql`INSERT INTO shapes (a) VALUES ('A')`.execute(store.db);
    const read = () =>
      store.transaction((tx) =>
        tx
          .selectFrom('shapes' as never)
          .selectAll()
          .execute(),
      );
    expect(await read()).toEqual([{ id: 1, a: 'A' }]);
    // Every better-sqlite3 statement shares one prototype: count the cookie's reads there, on this
    // file's connections only (a store another test file of this worker left open reads its own).
    const proto = Object.getPrototypeOf(new Database(':memory:').prepare('SELECT 1')) as { get: (...a: unknown[]) => unknown };
    const get = proto.get;
    let cookieReads = 0;
    proto.get = function (this: { source: string; database: { name: string } }, ...a: unknown[]) {
      if (this.source === 'PRAGMA schema_version' && this.database.name === file) cookieReads++;
      return get.apply(this, a);
    };
    const other = new Database(file);
    try {
      // Asked for in one turn: one group, one BEGIN … COMMIT, three statements that take their columns from the table.
      const rows = await Promise.all([read(), read(), read()]);
      expect(rows).toEqual([0, 1, 2].map(() => [{ id: 1, a: 'A' }]));
      expect(cookieReads).toBe(1);
      other.exec("ALTER TABLE shapes ADD COLUMN c TEXT NOT NULL DEFAULT 'C'");
      expect(await read()).toEqual([{ id: 1, a: 'A', c: 'C' }]);
      // Outside a group each statement asks again.
      other.exec("ALTER TABLE shapes ADD COLUMN d TEXT NOT NULL DEFAULT 'D'");
      expect(
        await store.db
          .selectFrom('shapes' as never)
          .selectAll()
          .execute(),
      ).toEqual([{ id: 1, a: 'A', c: 'C', d: 'D' }]);
    } finally {
      proto.get = get;
      other.close();
      await store.close();
    }
  });
});
