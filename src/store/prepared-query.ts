import type { CompiledQuery, Compilable, Kysely } from 'kysely';
import type { StoreAdapter } from './adapter.ts';

/** Where a run's value goes in a statement built once: a placeholder standing in for the value while Kysely builds. */
class Slot {
  constructor(readonly key: string) {}
}

/** Handles whose statements run at once on the connection they hold (sqlite-connection.ts, heldHandle): the text and values → rows. */
const atOnce = new WeakMap<object, (text: string, parameters: readonly unknown[]) => unknown[]>();

/** Mark `handle` as one whose prepared statements `run` runs at once, without Kysely's pipeline. */
export function runsAtOnce(handle: object, run: (text: string, parameters: readonly unknown[]) => unknown[]): void {
  atOnce.set(handle, run);
}

/**
 * A statement built and compiled by Kysely once per store (per dialect: SQLite and PostgreSQL
 * compile differently) and then run with each call's values: a hot statement whose text never
 * changes need not pay for Kysely's query building and compiling on every run (a sizeable share of a
 * task's CPU on SQLite).
 *
 * `build` receives the values as placeholders (`p.id` stands for the `id` given to each run) and
 * must not look at them: it may only pass them to Kysely as values (`where('id', '=', p.id)`,
 * `set({ x: p.x })`, `sql\`${p.x}\``). A column whose presence depends on a value (Kysely leaves
 * out `set({ x: undefined })`) does not belong in one, nor `values(p)` (`p` has no keys of its
 * own): name every column. What changes the text — a `LIMIT`, which SQLite needs written in the
 * text (sqlite-compiler.ts), a list of columns — is the `shape`: one compiled statement per shape
 * (so a shape takes few values), and `build` may read it. Row locks differ by store: a statement
 * with `store.lockRows` is made per store.
 */
export function preparedQuery<H extends Kysely<any>, P extends Record<string, unknown>, R, S extends string | number = never>(
  build: (db: H, p: P, shape: S) => Compilable<R>,
): (db: H, values: P, ...shape: [S] extends [never] ? [] : [S]) => Promise<R[]> {
  const slots = new Proxy({} as P, { get: (_, key) => new Slot(String(key)) });
  // One map per store: the dialect adapter is shared by every handle on it (transactions, connections).
  const compiled = new WeakMap<object, Map<S | undefined, CompiledQuery<R>>>();
  return async (db, values, ...rest) => {
    const shape = rest[0] as S;
    const adapter = db.getExecutor().adapter;
    let byShape = compiled.get(adapter);
    if (!byShape) compiled.set(adapter, (byShape = new Map()));
    let query = byShape.get(shape);
    if (!query) {
      // Compiled without plugins, which would see placeholders (Baton's stores have none; a test
      // that records statements sees a prepared one where it runs, at executeQuery).
      query = build(db.withoutPlugins() as H, slots, shape).compile();
      byShape.set(shape, query);
    }
    // An undefined value binds as NULL, as both drivers bind it in a statement Kysely built.
    const parameters = query.parameters.map((v) => (v instanceof Slot ? (values[v.key] ?? null) : v));
    // On a handle that holds its connection (a group commit's), run at once: nothing else can run
    // meanwhile, and a handle with plugins (a test recording statements) is never such a handle.
    const direct = atOnce.get(db);
    if (direct) return direct(query.sql, parameters) as R[];
    // The compiled statement with this run's values (its query node and id as compiled: no plugin
    // transforms it again). No value import of Kysely here: the CLI's HTTP-only commands load this
    // module and must not load Kysely (test/server/package.test.ts).
    const { rows } = await db.executeQuery<R>({ query: query.query, queryId: query.queryId, sql: query.sql, parameters });
    return rows;
  };
}

/**
 * A list of `n` values in a prepared statement (`where('id', 'in', listSlots(p, n))` in `build`,
 * with `n` its shape): one compiled text per length. Give the run the list itself as its values
 * (listValues): item i is the value of slot `i`.
 */
export function listSlots<T>(p: Readonly<Record<string, T>>, n: number): T[] {
  return Array.from({ length: n }, (_, i) => p[i]!);
}

/** A list as the values of a statement whose slots listSlots made (item i for slot `i`; no copy). */
export function listValues<T>(items: readonly T[]): Record<string, T> {
  return items as unknown as Record<string, T>;
}

/** One `make(store)` per store, made on first use: for prepared statements whose builder needs the store (row locks). */
export function perStore<T>(make: (store: StoreAdapter) => T): (store: StoreAdapter) => T {
  const made = new WeakMap<StoreAdapter, T>();
  return (store) => {
    let t = made.get(store);
    if (t === undefined) made.set(store, (t = make(store)));
    return t;
  };
}
