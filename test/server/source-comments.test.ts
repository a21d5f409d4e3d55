/**
 * Comments in the project's source give reasons, not history: no issue numbers, no migration
 * numbers (the migrations share one version line from the baseline; a number in a comment goes
 * stale), no figures recorded from one measurement, no section of docs/benchmarks.md (it holds
 * the current figures only, so its sections come and go), and no design notes kept outside the
 * repository. Scans every comment of src/ (migrations and the generated schema files aside: they
 * are SQL, shipped and never edited), web/src and packages/sdk, and names each offence by
 * file:line. Reads files only: no store is opened, so it costs both store projects nothing.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');
const ROOTS = ['src', 'web/src', 'packages/sdk'];
/** Shipped migrations are never edited, so their text is left as it was. */
const SKIPPED = ['src/store/migrations/'];
const SCRIPT_KINDS: Record<string, ts.ScriptKind> = { '.ts': ts.ScriptKind.TS, '.tsx': ts.ScriptKind.TSX, '.js': ts.ScriptKind.JS };

/** What a comment must not carry, by kind. Each pattern is narrow enough to have no false hits. */
const FORBIDDEN: ReadonlyArray<{ kind: string; pattern: RegExp }> = [
  { kind: 'issue', pattern: /(?:^|[\s(])#\d+\b/ },
  { kind: 'issue', pattern: /\bissues? #?\d+/i },
  // Migration versions are four digits below 0200 (modes such as 0600 or 0700 are not, nor U+0000).
  { kind: 'migration', pattern: /(?<![\w.+\\])0[01]\d{2}(?![\d.])/ },
  { kind: 'migration', pattern: /\bmigrations? #?\d+/i },
  { kind: 'timing', pattern: /\bmeasured(?::|,)? (?:at |on this |~)?\d/i },
  { kind: 'timing', pattern: /\bmeasured on this machine\b/i },
  { kind: 'timing', pattern: /\btook (?:up to |about |only |~)?\d/i },
  { kind: 'timing', pattern: /\b\d+(?:\.\d+)? ?(?:ms|µs|ns|s) (?:warm|cold|each|a task|per (?:task|claim|run|execution|statement|row))\b/ },
  { kind: 'timing', pattern: /\bp(?:50|95|99) (?:was|of \d)/ },
  { kind: 'benchmarks', pattern: /benchmarks\.md, ["“]/ },
  { kind: 'design', pattern: /DESIGN\.md/ },
];

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(ROOT, dir))) {
    const path = `${dir}/${name}`;
    if (name === 'node_modules' || name === 'dist' || SKIPPED.some((s) => path.startsWith(s))) continue;
    if (statSync(join(ROOT, path)).isDirectory()) out.push(...filesUnder(path));
    else if (/\.(?:ts|tsx|js|css)$/.test(name)) out.push(path);
  }
  return out;
}

/** Every comment of a file, with the offset it starts at. */
function comments(path: string, text: string): Array<{ pos: number; text: string }> {
  if (path.endsWith('.css')) return [...text.matchAll(/\/\*[\s\S]*?\*\//g)].map((m) => ({ pos: m.index, text: m[0] }));
  const kind = SCRIPT_KINDS[path.slice(path.lastIndexOf('.'))];
  const file = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true, kind);
  const found = new Map<number, string>();
  // Every comment is trivia of some token, punctuation and the end-of-file token included: leading
  // (on the lines before it) or trailing (on the line of the token before), so walking every token
  // finds each; a map by offset keeps each once.
  const visit = (node: ts.Node) => {
    const ranges = [...(ts.getLeadingCommentRanges(text, node.pos) ?? []), ...(ts.getTrailingCommentRanges(text, node.end) ?? [])];
    for (const r of ranges) found.set(r.pos, text.slice(r.pos, r.end));
    for (const child of node.getChildren(file)) visit(child);
  };
  visit(file);
  return [...found].map(([pos, t]) => ({ pos, text: t }));
}

/** `file:line: [kind] line text` for every forbidden mention in a comment of `path`. */
function offences(path: string, text: string): string[] {
  const out: string[] = [];
  const lineStarts = [0, ...[...text.matchAll(/\n/g)].map((m) => m.index + 1)];
  const lineOf = (pos: number) => {
    let lo = 0;
    while (lo + 1 < lineStarts.length && lineStarts[lo + 1]! <= pos) lo++;
    return lo + 1;
  };
  for (const c of comments(path, text)) {
    let offset = 0;
    for (const line of c.text.split('\n')) {
      const kinds = new Set(FORBIDDEN.filter((f) => f.pattern.test(line)).map((f) => f.kind));
      for (const kind of kinds) out.push(`${path}:${lineOf(c.pos + offset)}: [${kind}] ${line.trim()}`);
      offset += line.length + 1;
    }
  }
  const lineNo = (o: string) => Number(o.slice(path.length + 1, o.indexOf(':', path.length + 1)));
  return out.sort((a, b) => lineNo(a) - lineNo(b));
}

describe('source comments', () => {
  it('carry no issue or migration numbers, recorded figures, benchmark sections or outside notes', () => {
    const files = ROOTS.flatMap((r) => filesUnder(r));
    expect(files.length).toBeGreaterThan(100);
    const found = files.flatMap((f) => offences(f, readFileSync(join(ROOT, f), 'utf8')));
    expect(found).toEqual([]);
  });

  it('names each kind of offence by file and line', () => {
    const text = [
      'const a = 1; // fixed in issue 12',
      '/**',
      ' * The counters (migration 0023), #14.',
      ' * measured: 10,000 rows in 0.37 s; 40 ms warm. p99 was high (docs/benchmarks.md, "x").',
      ' * See DESIGN.md. Mode 0600, default 30 s, at most 63 bytes.',
      ' */',
      "const s = 'issue 12 #14 0023 in a string is no comment';",
      'const re = /issue 12/; // took 34 ms',
    ].join('\n');
    const got = offences('src/x.ts', text).map((o) => o.slice(0, o.indexOf(']') + 1));
    expect(got).toEqual([
      'src/x.ts:1: [issue]',
      'src/x.ts:3: [issue]',
      'src/x.ts:3: [migration]',
      'src/x.ts:4: [timing]',
      'src/x.ts:4: [benchmarks]',
      'src/x.ts:5: [design]',
      'src/x.ts:8: [timing]',
    ]);
  });
});
