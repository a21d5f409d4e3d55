/**
 * A store's live schema as executable SQL, in one deterministic order, for both dialects: what
 * `npm run schema` writes to src/store/schema.<dialect>.sql and what the migration tests compare.
 * PostgreSQL is read from its catalog (pg_get_functiondef, pg_get_indexdef, pg_get_triggerdef,
 * pg_get_constraintdef), so it needs no pg_dump matching the server's version; SQLite from
 * sqlite_master, whose text is the definition as the migrations left it.
 */
import Database from 'better-sqlite3';
import { sql } from 'kysely';
import pg from 'pg';
import type { StoreAdapter, StoreKind } from '../src/store/adapter.ts';
import { loadLegacyMigrations, MIGRATIONS_TABLE_SQL } from '../src/store/migrations.ts';
import { applyMigration } from '../src/store/sqlite-migrate.ts';

export interface DumpOptions {
  /** Also the rows every store holds (the ones migrations insert): INSERT statements. */
  rows?: boolean;
}

export async function dumpSchema(store: StoreAdapter, opts: DumpOptions = {}): Promise<string> {
  const parts = store.kind === 'sqlite' ? await sqliteSchema(store) : await postgresSchema(store);
  if (opts.rows) parts.push(...(await tableRows(store)));
  return parts.join('\n');
}

async function rows<T>(store: StoreAdapter, query: ReturnType<typeof sql>): Promise<T[]> {
  return (await query.execute(store.db)).rows as T[];
}

const OWN_TABLE = "name NOT LIKE 'sqlite_%' AND name <> 'baton_migrations'";

async function sqliteSchema(store: StoreAdapter): Promise<string[]> {
  const out: string[] = [];
  for (const type of ['table', 'index', 'trigger']) {
    const items = await rows<{ name: string; sql: string }>(
      store,
      sql`SELECT name, sql FROM sqlite_master WHERE type = ${type} AND sql IS NOT NULL AND tbl_name NOT LIKE 'sqlite_%'
            AND tbl_name <> 'baton_migrations' ORDER BY name`,
    );
    out.push(`-- ${type}s`, '', ...items.map((i) => `${i.sql};\n`));
  }
  return out;
}

async function postgresSchema(store: StoreAdapter): Promise<string[]> {
  const inSchema = sql`relnamespace = current_schema()::regnamespace`;
  const functions = await rows<{ def: string; nsp: string }>(
    store,
    sql`SELECT pg_get_functiondef(p.oid) AS def, quote_ident(current_schema()) AS nsp FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`,
  );
  const domains = await rows<{ name: string; base: string; notnull: boolean; dflt: string | null; checks: string[] }>(
    store,
    sql`SELECT t.typname AS name, format_type(t.typbasetype, t.typtypmod) AS base, t.typnotnull AS notnull, t.typdefault AS dflt,
          ARRAY(SELECT 'CONSTRAINT ' || quote_ident(k.conname) || ' ' || pg_get_constraintdef(k.oid) FROM pg_constraint k
                WHERE k.contypid = t.oid AND k.contype <> 'n' ORDER BY k.conname)::text[] AS checks
        FROM pg_type t WHERE t.typnamespace = current_schema()::regnamespace AND t.typtype = 'd' ORDER BY t.typname`,
  );
  const sequences = await rows<{ def: string }>(
    store,
    sql`SELECT 'CREATE SEQUENCE ' || quote_ident(c.relname) || ' AS ' || format_type(s.seqtypid, NULL) || ' START WITH ' || s.seqstart
          || ' INCREMENT BY ' || s.seqincrement || ' MINVALUE ' || s.seqmin || ' MAXVALUE ' || s.seqmax || ' CACHE ' || s.seqcache
          || CASE WHEN s.seqcycle THEN ' CYCLE' ELSE '' END || ';' AS def
        FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid WHERE ${inSchema} ORDER BY c.relname`,
  );
  const tables = await rows<{ name: string; columns: string[]; options: string[] | null }>(
    store,
    sql`SELECT quote_ident(c.relname) AS name, c.reloptions AS options,
          ARRAY(SELECT quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod)
                  || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
                  || COALESCE(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
                FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)::text[] AS columns
        FROM pg_class c WHERE ${inSchema} AND c.relkind = 'r' AND c.relname <> 'baton_migrations' ORDER BY c.relname`,
  );
  const owned = await rows<{ def: string }>(
    store,
    sql`SELECT 'ALTER SEQUENCE ' || quote_ident(s.relname) || ' OWNED BY ' || quote_ident(t.relname) || '.' || quote_ident(a.attname) || ';' AS def
        FROM pg_depend d JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S' JOIN pg_class t ON t.oid = d.refobjid
        JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid
        WHERE d.classid = 'pg_class'::regclass AND d.deptype = 'a' AND s.relnamespace = current_schema()::regnamespace ORDER BY s.relname`,
  );
  // Functions come after the tables whose row types they name, before the checks that call them.
  // Keys and checks before foreign keys, which need the keys they reference. NOT NULL is the
  // column's (newer servers also list it here).
  const constraints = await rows<{ def: string }>(
    store,
    sql`SELECT 'ALTER TABLE ' || quote_ident(c.relname) || ' ADD CONSTRAINT ' || quote_ident(k.conname) || ' ' || pg_get_constraintdef(k.oid) || ';' AS def
        FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid WHERE ${inSchema}
        AND k.contype <> 'n' AND c.relname <> 'baton_migrations'
        ORDER BY k.contype = 'f', c.relname, position(k.contype::text IN 'puxcf'), k.conname`,
  );
  const indexes = await rows<{ def: string }>(
    store,
    sql`SELECT pg_get_indexdef(i.indexrelid, 0, true) || ';' AS def FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        JOIN pg_class t ON t.oid = i.indrelid
        WHERE t.relnamespace = current_schema()::regnamespace AND t.relname <> 'baton_migrations'
          AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.contype IN ('p', 'u', 'x'))
        ORDER BY t.relname, c.relname`,
  );
  const triggers = await rows<{ def: string }>(
    store,
    sql`SELECT pg_get_triggerdef(g.oid, true) || ';' AS def FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
        WHERE NOT g.tgisinternal AND ${inSchema} ORDER BY c.relname, g.tgname`,
  );
  return [
    '-- domains',
    '',
    ...domains.map(
      (d) =>
        `CREATE DOMAIN ${d.name} AS ${d.base}${d.dflt ? ` DEFAULT ${d.dflt}` : ''}${d.notnull ? ' NOT NULL' : ''}` +
        d.checks.map((k) => `\n  ${k}`).join('') +
        ';\n',
    ),
    '-- sequences',
    '',
    ...sequences.map((s) => s.def),
    '',
    '-- tables',
    '',
    ...tables.map(
      (t) =>
        `CREATE TABLE ${t.name} (\n${t.columns.map((c) => `  ${c}`).join(',\n')}\n)${t.options ? ` WITH (${t.options.join(', ')})` : ''};\n`,
    ),
    ...owned.map((o) => o.def),
    '',
    '-- functions',
    '',
    // pg_get_functiondef names the function with its schema, whatever the search path.
    ...functions.map((f) => `${f.def.replace(`FUNCTION ${f.nsp}.`, 'FUNCTION ').trimEnd()};\n`),
    '-- constraints',
    '',
    ...constraints.map((k) => k.def),
    '',
    '-- indexes',
    '',
    ...indexes.map((i) => i.def),
    '',
    '-- triggers',
    '',
    ...triggers.map((t) => t.def),
    '',
  ];
}

/** INSERT statements for every row of every table but baton_migrations, in key order. */
async function tableRows(store: StoreAdapter): Promise<string[]> {
  const tables =
    store.kind === 'sqlite'
      ? await rows<{ name: string }>(store, sql.raw(`SELECT name FROM sqlite_master WHERE type = 'table' AND ${OWN_TABLE} ORDER BY name`))
      : await rows<{ name: string }>(
          store,
          sql`SELECT relname AS name FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'
                AND relname <> 'baton_migrations' ORDER BY relname`,
        );
  const out: string[] = ['-- rows every store starts with', ''];
  for (const { name } of tables) {
    const query =
      store.kind === 'sqlite'
        ? sql.raw(
            `SELECT (SELECT group_concat('"' || name || '"', ', ') FROM pragma_table_info('${name}')) AS cols,
                    ${(await rows<{ name: string }>(store, sql`SELECT name FROM pragma_table_info(${name}) ORDER BY cid`))
                      .map((c) => `quote("${c.name}")`)
                      .join(" || ', ' || ")} AS vals
             FROM "${name}" ORDER BY 1, 2`,
          )
        : sql.raw(
            `SELECT (SELECT string_agg(quote_ident(key), ', ' ORDER BY n) FROM json_each_text(row_to_json(t)) WITH ORDINALITY AS e(key, value, n)) AS cols,
                    (SELECT string_agg(quote_nullable(value), ', ' ORDER BY n) FROM json_each_text(row_to_json(t)) WITH ORDINALITY AS e(key, value, n)) AS vals
             FROM "${name}" t ORDER BY 2`,
          );
    for (const r of await rows<{ cols: string; vals: string }>(store, query))
      out.push(`INSERT INTO ${name} (${r.cols}) VALUES (${r.vals});`);
  }
  out.push('');
  return out;
}

export type LegacyTarget = { kind: 'sqlite'; file: string } | { kind: 'postgres'; url: string; schema: string };

/**
 * Migrate a store the way every release before the baseline did: the legacy chain, up to and
 * including `upTo`, each version recorded in baton_migrations, in one transaction; then `then`
 * (plain SQL valid at that version) in the same connection. The store is not opened.
 */
export async function migrateLegacy(target: LegacyTarget, upTo = Infinity, then = ''): Promise<void> {
  const chain = loadLegacyMigrations(target.kind).filter((m) => m.version <= upTo);
  if (target.kind === 'sqlite') {
    const raw = new Database(target.file);
    try {
      raw.pragma('journal_mode = WAL');
      raw.exec('BEGIN IMMEDIATE');
      raw.exec(MIGRATIONS_TABLE_SQL);
      for (const m of chain) {
        applyMigration(raw, m.sql);
        raw.prepare('INSERT INTO baton_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(m.version, m.name, Date.now());
      }
      raw.exec('COMMIT');
      if (then) raw.exec(then);
    } finally {
      raw.close();
    }
    return;
  }
  const client = new pg.Client({ connectionString: target.url, options: `-c search_path=${target.schema}` });
  await client.connect();
  try {
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${target.schema}`);
    await client.query('BEGIN');
    await client.query(MIGRATIONS_TABLE_SQL);
    for (const m of chain) {
      await client.query(m.sql);
      await client.query('INSERT INTO baton_migrations (version, name, applied_at) VALUES ($1, $2, $3)', [m.version, m.name, Date.now()]);
    }
    await client.query('COMMIT');
    if (then) await client.query(then);
  } finally {
    await client.end();
  }
}

export function schemaFile(kind: StoreKind): URL {
  return new URL(`../src/store/schema.${kind}.sql`, import.meta.url);
}
