import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// Every writer of an execution row, found by reading the source. Status is written only in
// src/engine/transitions/, one module per transition, and every UPDATE there is a
// compare-and-set on the status it expects. Adding a writer anywhere is a visible change to
// the lists below; an unguarded UPDATE fails outright. New executions are inserted by one
// function only, createExecutions in src/engine/transitions/create.ts: every path that creates
// work goes through its admission rules (backlog, audit). On PostgreSQL a plain submit is the
// same creation as one function call (baton_submit; many at once: baton_submit_many), called
// from the store's fast paths only (src/store/postgres-fast-paths.ts).
// Likewise completions that cause nothing else are one call of baton_complete_many,
// completeWithLease's guarded UPDATE per row, called from the store's fast paths only.

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SRC = join(ROOT, 'src');
const TRANSITIONS = 'src/engine/transitions/';

/** Files that write `executions` rows. Change this list on purpose, with a guard, or not at all. */
const EXPECTED_WRITERS = [
  'src/engine/transitions/admit.ts', // queued → running
  'src/engine/transitions/cancel.ts', // queued → cancelled; running: cancel requested
  'src/engine/transitions/complete.ts', // running | re-queued → succeeded | failed | cancelled
  'src/engine/transitions/create.ts', // create → queued | skipped: createExecutions, the one insert of executions
  'src/engine/transitions/debounce.ts', // queued stays queued: a debounced task takes a later submit's message
  'src/engine/transitions/expire.ts', // the reaper: requeued, poisoned, timeout, cancel, backlog_expired
  'src/engine/transitions/release.ts', // running → queued | cancelled
  'src/engine/transitions/renew.ts', // heartbeat: the lease only, guarded like the rest
];

/** The one function that inserts executions (any other insert, in that file too, fails). */
/**
 * The creator, and the function that builds its one-row statement (prepared once per shape by
 * preparedQuery, so it lives outside the creator's body): used by the creator only.
 */
const CREATOR = { file: 'src/engine/transitions/create.ts', fn: 'createExecutions', statement: 'oneRowInsert' };
/** PostgreSQL's fast paths (StoreAdapter.fastPaths): the one caller of the submit functions. */
const FAST_SUBMIT = 'src/store/postgres-fast-paths.ts';

/**
 * The one exception to "history is never deleted": the retention pruner removes finished
 * executions past the operator's window with their events, only inside the transaction the
 * database lets delete history (store.pruneTransaction). The pruner runs that transaction; the
 * store's deletes (store.deleteExecutionChains, one per dialect) remove the rows.
 */
const PRUNER = 'src/retention/prune.ts';
const PRUNE_DELETES = 'src/store/prune-deletes.ts';
/** What the prune deletes may write: deletes, through the query builder or (PostgreSQL's one-statement batch) raw SQL. */
const PRUNER_WRITES = ['deleteFrom', 'sql DELETE FROM'];

const q = `(['"\`])`; // any quote, captured so the closing one matches
const TABLE = `(?:\\w+\\.)?executions(?:\\s+as\\s+\\w+)?`;
/** Query-builder writes: updateTable('executions'), insertInto("executions"), deleteFrom(`executions as e`)… */
const BUILDER_WRITE = new RegExp(`\\b(updateTable|insertInto|replaceInto|mergeInto|deleteFrom)\\(\\s*${q}${TABLE}\\2\\s*\\)`, 'g');
/** Raw SQL writes: UPDATE executions, INSERT INTO "executions", DELETE FROM schema.executions… */
const RAW_WRITE =
  /\b(UPDATE|INSERT\s+(?:OR\s+\w+\s+)?INTO|REPLACE\s+INTO|MERGE\s+INTO|DELETE\s+FROM)\s+(?:\w+\.)?("?)executions\2(?![\w"])/gi;
const EVENT_WRITE = new RegExp(
  `\\b(updateTable|insertInto|deleteFrom)\\(\\s*${q}(?:\\w+\\.)?execution_events(?:\\s+as\\s+\\w+)?\\2\\s*\\)|\\b(?:UPDATE|INSERT\\s+INTO|DELETE\\s+FROM)\\s+"?execution_events\\b`,
  'gi',
);
/**
 * A status guard: `.where('status', '=' | 'in', <what>)`, the column also as `sql.ref('…status')` or
 * as statusUnindexed('…status') (the same compare, which no index answers: status-sql.ts); <what> is
 * read up to its closing parenthesis.
 */
const STATUS_GUARD = new RegExp(
  `\\.where\\(\\s*(?:(?:sql\\.ref|statusUnindexed)\\(\\s*)?${q}(?:\\w+\\.)?status\\1\\s*\\)?\\s*,\\s*${q}(=|in)\\2\\s*,`,
  'g',
);
/** A guard written once for several writers: `.$call(name(…))`, with `function name` in the same module. */
const GUARD_CALL = /\.\$call\(\s*(\w+)\(/g;
/**
 * What a guard may compare with: the live states only, as literals or the names that stand for
 * them. A guard that admits a terminal state (or anything this list does not know) could move a
 * finished execution: refused.
 */
const LIVE_GUARD_TOKENS = new Set([
  "'queued'",
  "'running'",
  '"queued"',
  '"running"',
  'QUEUED',
  'RUNNING',
  'LIVE_STATUSES',
  "statusIs('queued')",
  "statusIs('running')",
]);
/** Bulk inserts through the store adapter: `insertMany(tx, 'executions', rows)`. */
const BULK_WRITE = new RegExp(`\\binsertMany\\(\\s*\\w+\\s*,\\s*${q}executions\\1`, 'g');
const CHAIN_END = /\.(execute\w*|returning\w*|compile)\s*\(/;

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return tsFiles(p);
    return e.name.endsWith('.ts') ? [p] : [];
  });
}

/** Prose may name the table freely: comments are blanked (keeping offsets) before scanning. */
function stripComments(code: string): string {
  const blank = (m: string) => m.replace(/[^\n]/g, ' ');
  return code.replace(/\/\*[\s\S]*?\*\//g, blank).replace(/^\s*\/\/.*$/gm, blank);
}

interface Write {
  kind: string;
  line: number;
  /** From the table name to the end of the statement builder (query builder writes only). */
  chain?: string;
  /** The chain reaches .execute…()/.returning…(). */
  ended?: boolean;
}

function findWrites(code: string): Write[] {
  const text = stripComments(code);
  const lineOf = (i: number) => text.slice(0, i).split('\n').length;
  const out: Write[] = [];
  for (const m of text.matchAll(BUILDER_WRITE)) {
    const rest = text.slice(m.index);
    const end = rest.search(CHAIN_END);
    out.push({ kind: m[1]!, line: lineOf(m.index!), chain: end < 0 ? rest : rest.slice(0, end), ended: end >= 0 });
  }
  for (const m of text.matchAll(RAW_WRITE)) out.push({ kind: `sql ${m[1]!.replace(/\s+/g, ' ').toUpperCase()}`, line: lineOf(m.index!) });
  for (const m of text.matchAll(BULK_WRITE)) out.push({ kind: 'insertMany', line: lineOf(m.index!) });
  return out.sort((a, b) => a.line - b.line);
}

/**
 * The lines (first, last) of each body of `function <name>` in stripped code: overload
 * signatures (ending in `;`) have none. A return type may hold angle brackets, not braces.
 */
function functionBodies(text: string, name: string): Array<[number, number]> {
  const lineOf = (i: number) => text.slice(0, i).split('\n').length;
  const out: Array<[number, number]> = [];
  for (const m of text.matchAll(new RegExp(`\\bfunction\\s+${name}\\s*(?:<[^(]*>)?\\s*\\(`, 'g'))) {
    let i = m.index! + m[0].length;
    for (let depth = 1; i < text.length && depth > 0; i++) {
      if (text[i] === '(') depth++;
      else if (text[i] === ')') depth--;
    }
    let angle = 0;
    for (; i < text.length; i++) {
      const c = text[i];
      if (c === '<') angle++;
      else if (c === '>' && text[i - 1] !== '=') angle--;
      else if (angle === 0 && (c === ';' || c === '{')) break;
    }
    if (text[i] !== '{') continue; // an overload
    const start = i;
    for (let depth = 0; i < text.length; i++) {
      if (text[i] === '{') depth++;
      else if (text[i] === '}' && --depth === 0) break;
    }
    out.push([lineOf(start), lineOf(i)]);
  }
  return out;
}

/** Inserts of executions in `file` that are not inside CREATOR's one body, as `file:line kind`. */
function strayInserts(file: string, code: string): string[] {
  const inserts = findWrites(code).filter((w) => !['updateTable', 'deleteFrom', 'sql UPDATE', 'sql DELETE FROM'].includes(w.kind));
  const text = stripComments(code);
  // A second implementation of either leaves it untrusted.
  const one = (name: string) => {
    const b = functionBodies(text, name);
    return b.length === 1 ? b : [];
  };
  const bodies = file === CREATOR.file ? [...one(CREATOR.fn), ...one(CREATOR.statement)] : [];
  return inserts
    .filter((w) => !bodies.some(([first, last]) => w.line >= first && w.line <= last))
    .map((w) => `${file}:${w.line} ${w.kind}`);
}

/**
 * Why a query-builder UPDATE in `code` is not an acceptable status writer, or null if it is. Its
 * guards: those in its chain, and those of a function of the module it applies (GUARD_CALL).
 */
function unguarded(w: Write, code: string): string | null {
  if (w.kind !== 'updateTable' || w.chain === undefined) return null;
  if (!w.ended || w.chain.includes(';')) {
    return 'the builder does not end in .execute…()/.returning…() within one statement; write it as one chain';
  }
  const text = stripComments(code);
  const lines = text.split('\n');
  const helpers = [...w.chain.matchAll(GUARD_CALL)].flatMap((m) => {
    const bodies = functionBodies(text, m[1]!);
    return bodies.length === 1 ? [lines.slice(bodies[0]![0] - 1, bodies[0]![1]).join('\n')] : [];
  });
  const guards = [w.chain, ...helpers].flatMap(statusGuards);
  if (guards.length === 0) return "no .where('status', …) guard before it executes";
  const loose = guards.filter((g) => !g.every((t) => LIVE_GUARD_TOKENS.has(t)));
  if (loose.length) return `a status guard that may match a terminal state: ${loose.map((g) => g.join(' ')).join('; ')}`;
  return null;
}

/** Each status guard's compared values, as tokens: `'queued'`, `RUNNING`, `statusIs('queued')`… */
function statusGuards(chain: string): string[][] {
  const out: string[][] = [];
  for (const m of chain.matchAll(STATUS_GUARD)) {
    // The third argument, to the parenthesis that closes the .where( call.
    let depth = 1;
    let i = m.index! + m[0].length;
    const start = i;
    for (; i < chain.length && depth > 0; i++) {
      if (chain[i] === '(') depth++;
      else if (chain[i] === ')') depth--;
    }
    const arg = chain
      .slice(start, i - 1)
      .trim()
      .replace(/^\[|\]$/g, '');
    out.push(
      arg
        .split(',')
        .map((t) => t.trim().replace(/\s+/g, ''))
        .filter(Boolean),
    );
  }
  return out;
}

const sources = tsFiles(SRC)
  .sort()
  .map((path) => ({ file: relative(ROOT, path).split('\\').join('/'), code: readFileSync(path, 'utf8') }));

describe('the writers of execution status', () => {
  it('finds the source to scan', () => {
    expect(sources.length).toBeGreaterThan(10);
    expect(sources.map((s) => s.file)).toEqual(expect.arrayContaining(EXPECTED_WRITERS));
  });

  it('only src/engine/transitions/ writes executions rows, and the writers are exactly the known list', () => {
    const writers = sources.filter((s) => s.file !== PRUNE_DELETES && findWrites(s.code).length > 0).map((s) => s.file);
    const outside = sources
      .filter((s) => !s.file.startsWith(TRANSITIONS))
      .flatMap((s) =>
        findWrites(s.code)
          .filter((w) => !(s.file === PRUNE_DELETES && PRUNER_WRITES.includes(w.kind)))
          .map((w) => `${s.file}:${w.line} ${w.kind}`),
      );
    console.log(`executions writers:\n  ${writers.join('\n  ')}`);
    expect(outside, 'writes to executions outside src/engine/transitions/ (add a transition module instead)').toEqual([]);
    expect(writers).toEqual(EXPECTED_WRITERS);
  });

  it(`only ${CREATOR.fn} (${CREATOR.file}) inserts executions`, () => {
    const creator = sources.find((s) => s.file === CREATOR.file);
    expect(creator, `${CREATOR.file} exists`).toBeDefined();
    const text = stripComments(creator!.code);
    expect(functionBodies(text, CREATOR.fn), `one implementation of ${CREATOR.fn}`).toHaveLength(1);
    expect(functionBodies(text, CREATOR.statement), `one ${CREATOR.statement}`).toHaveLength(1);
    // Its statement is reached only from the creator: \`oneRowInsert\` is named in the body of
    // createExecutions and in the one preparedQuery made of it, whose name the creator alone uses.
    const [[first, last]] = functionBodies(text, CREATOR.fn) as [[number, number]];
    const lines = text.split('\n');
    const uses = (name: string) => lines.flatMap((l, i) => (new RegExp(`\\b${name}\\b`).test(l) ? [i + 1] : []));
    const prepared = /const (\w+) = preparedQuery\(oneRowInsert\);/.exec(text);
    expect(prepared, 'const … = preparedQuery(oneRowInsert)').not.toBeNull();
    const outsideCreator = (name: string, except: number[]) => uses(name).filter((l) => (l < first || l > last) && !except.includes(l));
    const declared = uses(CREATOR.statement).filter((l) => /function oneRowInsert|preparedQuery\(oneRowInsert\)/.test(lines[l - 1]!));
    expect(outsideCreator(CREATOR.statement, declared), `${CREATOR.statement} used outside ${CREATOR.fn}`).toEqual([]);
    expect(outsideCreator(prepared![1]!, declared), `${prepared![1]} used outside ${CREATOR.fn}`).toEqual([]);
    for (const s of sources.filter((x) => x.file !== CREATOR.file))
      expect(new RegExp(`\\b${CREATOR.statement}\\b`).test(stripComments(s.code)), `${s.file} uses ${CREATOR.statement}`).toBe(false);
    const stray = sources.flatMap((s) => strayInserts(s.file, s.code));
    expect(stray, `inserts into executions outside ${CREATOR.fn}: create work through it`).toEqual([]);
    // It does insert: the one-row statement (backlog checked in it) and the bulk one.
    expect(findWrites(creator!.code).map((w) => w.kind)).toEqual(['insertMany', 'insertInto']);
  });

  it('in SQL, only the submit functions insert executions, called from the store fast paths only', () => {
    // PostgreSQL runs plain submits as one function call (baton_submit: a call of
    // baton_submit_many with one element, which reads the backlog counters and writes the call's
    // rows in one INSERT): the same turn, backlog rule, row and audit as createExecutions, held
    // equal to it by test/cost/one-statement.test.ts (a keyed row, its round: test/cost/keyed-submit.test.ts).
    // The baseline holds today's functions; legacy/ the chains it replaced, run only on old stores.
    const dir = join(SRC, 'store', 'migrations');
    const inserting = readdirSync(dir)
      .flatMap((kind) => [kind, `${kind}/legacy`])
      .flatMap((folder) => readdirSync(join(dir, folder)).flatMap((f) => (f.endsWith('.sql') ? [`${folder}/${f}`] : [])))
      .filter((f) => [...readFileSync(join(dir, f), 'utf8').matchAll(RAW_WRITE)].some((m) => /^INSERT/i.test(m[1]!)))
      .sort();
    expect(inserting).toEqual([
      'postgres/0100_baseline.sql',
      'postgres/0109_keyed_submit.sql',
      'postgres/legacy/0020_submit_function.sql',
      'postgres/legacy/0024_submit_many.sql',
      'postgres/legacy/0031_backlog_counter.sql',
      'postgres/legacy/0032_submit_many_set.sql',
    ]);
    for (const fn of ['baton_submit', 'baton_submit_many']) {
      const callers = sources.filter((s) => new RegExp(`\\b${fn}\\(`).test(stripComments(s.code))).map((s) => s.file);
      expect(callers, fn).toEqual([FAST_SUBMIT]);
    }
  });

  it('every UPDATE of executions in the transitions is a compare-and-set on status', () => {
    const problems: string[] = [];
    let updates = 0;
    for (const s of sources.filter((x) => x.file.startsWith(TRANSITIONS))) {
      for (const w of findWrites(s.code)) {
        if (w.kind.startsWith('sql '))
          problems.push(`${s.file}:${w.line} raw SQL write (${w.kind}): use the query builder so the guard can be checked`);
        if (w.kind === 'deleteFrom') problems.push(`${s.file}:${w.line} deletes executions: history is never deleted`);
        // The values may be built before the chain: look in the whole module.
        if ((w.kind === 'insertInto' || w.kind === 'insertMany') && !/\bstatus:\s*(['"])(queued|skipped)\1/.test(stripComments(s.code))) {
          problems.push(`${s.file}:${w.line} inserts an execution that does not start queued (or skipped)`);
        }
        if (
          w.kind === 'insertMany' &&
          !/status\s*!==\s*(['"])queued\1\s*&&\s*\w+\.status\s*!==\s*(['"])skipped\2/.test(stripComments(s.code))
        ) {
          problems.push(`${s.file}:${w.line} bulk-inserts executions without checking each row starts queued or skipped`);
        }
        if (w.kind === 'updateTable') updates++;
        const why = unguarded(w, s.code);
        if (why) problems.push(`${s.file}:${w.line} ${why}`);
      }
    }
    expect(problems).toEqual([]);
    expect(updates).toBeGreaterThanOrEqual(EXPECTED_WRITERS.length - 1); // every writer but create updates
  });

  it('nothing outside src/engine/transitions/ writes the event log', () => {
    // Events are appended by the transitions (or by a database trigger on executions, which
    // needs no TypeScript writer at all); never by the API, CLI or server.
    const writers = sources.filter((s) => [...stripComments(s.code).matchAll(EVENT_WRITE)].length > 0).map((s) => s.file);
    console.log(`execution_events writers: ${writers.join(', ') || '(none in TypeScript)'}`);
    expect(writers.filter((f) => !f.startsWith(TRANSITIONS) && f !== PRUNE_DELETES)).toEqual([]);
  });

  it('the pruner only deletes, and only inside the pruning transaction', () => {
    const deletes = sources.find((s) => s.file === PRUNE_DELETES);
    expect(deletes, `${PRUNE_DELETES} exists`).toBeDefined();
    const code = stripComments(deletes!.code);
    expect(findWrites(code).map((w) => w.kind)).toEqual(expect.arrayContaining(['deleteFrom', 'sql DELETE FROM']));
    expect(findWrites(code).filter((w) => !PRUNER_WRITES.includes(w.kind))).toEqual([]);
    expect([...code.matchAll(EVENT_WRITE)].every((m) => m[1] === 'deleteFrom' || /^DELETE\s+FROM/i.test(m[0]))).toBe(true);
    // The deletes are called from the pruner only, inside its transaction.
    const pruner = stripComments(sources.find((s) => s.file === PRUNER)!.code);
    expect(pruner).toMatch(/\.pruneTransaction\([^]*\.deleteExecutionChains\(/);
    const callers = sources.filter((s) => !s.file.startsWith('src/store/') && /\.deleteExecutionChains\(/.test(stripComments(s.code)));
    expect(callers.map((s) => s.file)).toEqual([PRUNER]);
  });

  it('the scanner itself catches what it must (and ignores prose)', () => {
    const kinds = (code: string) => findWrites(code).map((w) => w.kind);
    expect(kinds(`db.updateTable('executions').set({ status: 'failed' }).execute()`)).toEqual(['updateTable']);
    expect(kinds(`db.updateTable("executions as e").set({}).execute()`)).toEqual(['updateTable']);
    expect(kinds('tx.insertInto(`executions`).values(row).execute()')).toEqual(['insertInto']);
    expect(kinds(`tx.deleteFrom( 'executions' ).execute()`)).toEqual(['deleteFrom']);
    expect(kinds("await sql`UPDATE executions SET status = 'failed'`.execute(db)")).toEqual(['sql UPDATE']);
    expect(kinds(`client.query('insert into "executions" (id) values ($1)')`)).toEqual(['sql INSERT INTO']);
    expect(kinds(`client.query('UPDATE public.executions SET x = 1')`)).toEqual(['sql UPDATE']);
    expect(kinds(`tx.updateTable('execution_events'); tx.insertInto('executions_archive'); sql\`UPDATE executions_x\``)).toEqual([]);
    expect(kinds(`selectFrom('executions').where('status', '=', 'running')`)).toEqual([]);
    expect(kinds(`await engine.store.insertMany(tx, 'executions', rows)`)).toEqual(['insertMany']);
    expect(kinds(`await store.insertMany(tx, 'audit_log', rows)`)).toEqual([]);
    expect(kinds(`// we never UPDATE executions here\n/* updateTable('executions') */ const x = 1;`)).toEqual([]);

    // An insert counts only inside the one creating function's body, wherever else it sits.
    const creatorCode = [
      `export function ${CREATOR.fn}(tx: Tx, req: One): Promise<Row | undefined>;`,
      `export async function ${CREATOR.fn}(tx: Tx, req: One | Many): Promise<Map<string, { a: 1 }> | void> {`,
      `  if (req.many) { await store.insertMany(tx, 'executions', req.rows); return; }`,
      `  return tx.insertInto('executions').values(req.row).returningAll().executeTakeFirst();`,
      `}`,
      `async function other(tx: Tx) {`,
      `  await tx.insertInto('executions').values(row).execute();`,
      `}`,
    ].join('\n');
    expect(strayInserts(CREATOR.file, creatorCode)).toEqual([`${CREATOR.file}:7 insertInto`]);
    expect(strayInserts('src/engine/other.ts', creatorCode)).toEqual([
      'src/engine/other.ts:3 insertMany',
      'src/engine/other.ts:4 insertInto',
      'src/engine/other.ts:7 insertInto',
    ]);
    expect(strayInserts(CREATOR.file, `sql\`INSERT INTO executions (id) VALUES (1)\`.execute(db)`)).toEqual([
      `${CREATOR.file}:1 sql INSERT INTO`,
    ]);
    expect(strayInserts('src/x.ts', `tx.updateTable('executions').set({}).where('status', '=', 'queued').execute()`)).toEqual([]);
    // Two bodies (a second implementation) leave no body trusted.
    expect(strayInserts(CREATOR.file, `${creatorCode}\nfunction ${CREATOR.fn}() {}`)).toHaveLength(3);

    const guard = (code: string) => findWrites(code).map((w) => unguarded(w, code));
    expect(
      guard(
        `tx.updateTable('executions').set({ status: 'queued' }).where('id', '=', id).where('status', '=', 'running').returningAll().executeTakeFirst()`,
      ),
    ).toEqual([null]);
    expect(guard(`tx.updateTable('executions').set({ status: 'queued' }).where('id', '=', id).executeTakeFirst()`)[0]).toMatch(
      /no \.where\('status'/,
    );
    // A guard after the statement ran does not count.
    expect(guard(`tx.updateTable('executions').set({ status: 'x' }).execute(); q.where('status', '=', 'queued')`)[0]).toMatch(
      /no \.where\('status'/,
    );
    // A guard must exclude the terminal states.
    expect(
      guard(
        `tx.updateTable('executions').set({ status: 'x' }).where('id', '=', id).where('status', 'in', ['running', 'queued']).execute()`,
      ),
    ).toEqual([null]);
    expect(guard(`tx.updateTable('executions').set({ status: 'x' }).where('status', '=', RUNNING).execute()`)).toEqual([null]);
    // The column written so that no index answers the compare is the same guard.
    expect(
      guard(`db.updateTable('executions').set({}).where(statusUnindexed('executions.status'), 'in', ['running', 'queued']).execute()`),
    ).toEqual([null]);
    expect(
      guard(`db.updateTable('executions').set({}).where(statusUnindexed('executions.status'), 'in', ['running', 'failed']).execute()`)[0],
    ).toMatch(/terminal state/);
    expect(
      guard(
        `tx.updateTable('executions').set({ status: 'x' }).where('status', 'in', ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'skipped']).execute()`,
      )[0],
    ).toMatch(/may match a terminal state/);
    expect(guard(`tx.updateTable('executions').set({ status: 'x' }).where('status', '=', 'succeeded').execute()`)[0]).toMatch(
      /may match a terminal state/,
    );
    expect(guard(`tx.updateTable('executions').set({ status: 'x' }).where('status', 'in', EXECUTION_STATES).execute()`)[0]).toMatch(
      /may match a terminal state/,
    );
    expect(guard(`tx.updateTable('executions').set({ status: 'x' }).where('status', '<>', 'failed').execute()`)[0]).toMatch(
      /no \.where\('status'/,
    );
    // A guard written once, applied with $call: its function's own guards count, and must be live.
    const held = (statuses: string) =>
      `function held(id: string) {\n  return (qb: Q) => qb.where(sql.ref('executions.id'), '=', id).where(sql.ref('executions.status'), 'in', ${statuses});\n}\n` +
      `tx.updateTable('executions').set({ status: 'x' }).$call(held(id)).returningAll()`;
    expect(guard(held(`['running', 'queued']`))).toEqual([null]);
    expect(guard(held(`['running', 'failed']`))[0]).toMatch(/may match a terminal state/);
    expect(guard(held(`['running']`).replace('function held', 'function other'))[0]).toMatch(/no \.where\('status'/);
    // A builder kept in a variable cannot be checked: refused.
    expect(
      guard(`const b = tx.updateTable('executions').set({ status: 'x' }); await b.where('status', '=', 'queued').execute();`)[0],
    ).toMatch(/one chain/);
  });
});
