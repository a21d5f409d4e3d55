/**
 * The suite's build of dist/ (test/setup/dist.ts runs it before every `vitest run`, and again
 * before each rerun in watch mode):
 *   - src/**\/*.ts → dist/**\/*.js, emitted by TypeScript's own emitter file by file, the same
 *     JavaScript `npm run build` writes (without its type check and declarations: `npm run
 *     typecheck` checks types);
 *   - the runtime assets (RUNTIME_ASSETS) copied beside them, where the compiled code finds them by
 *     URL exactly as in an installed package;
 *   - the multi-process test fixtures, test/fixtures/*.ts → dist/.test/fixtures/*.js, their imports
 *     of src/ pointed at dist/.
 * The child processes the tests start (test/helpers/baton.js, test/helpers/processes.ts) then load
 * compiled JavaScript instead of compiling every module through tsx on every start.
 *
 * Incremental, and never stale: dist/.test-build.json records, for each output, the hash of its
 * source and of what was written. An output is rewritten unless its source and its own content
 * still hash as recorded; a change to the compiler options, to TypeScript or to this file rebuilds
 * everything; a file in dist/ that no current source produces (a deleted module) is removed.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Files under src/ that no import names: the code finds them with `new URL(…, import.meta.url)`. */
export const RUNTIME_ASSETS = ['store/migrations', 'store/sqlite-reader-worker.js', 'store/thread-priority.js', 'engine/json-worker.js'];

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DIST = join(ROOT, 'dist');
const MANIFEST = join(DIST, '.test-build.json');
/** Where the fixtures go: two levels under dist/, so `../../` from there is dist/. */
const FIXTURES_OUT = join(DIST, '.test', 'fixtures');

type Kind = 'module' | 'asset' | 'fixture';
interface Job {
  kind: Kind;
  src: string;
  out: string;
}
interface Manifest {
  key: string;
  outputs: Record<string, { src: string; out: string }>;
}
export interface BuildResult {
  written: number;
  removed: number;
  ms: number;
}

const sha = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');
const posix = (p: string) => p.split(sep).join('/');

function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  if (!statSync(dir).isDirectory()) return [dir];
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .map((f) => join(dir, f))
    .filter((f) => statSync(f).isFile());
}

function jobs(): Job[] {
  const src = join(ROOT, 'src');
  const out: Job[] = [];
  for (const f of filesUnder(src)) {
    if (f.endsWith('.ts') && !f.endsWith('.d.ts'))
      out.push({ kind: 'module', src: f, out: join(DIST, relative(src, f)).replace(/\.ts$/, '.js') });
  }
  for (const asset of RUNTIME_ASSETS) {
    for (const f of filesUnder(join(src, asset))) out.push({ kind: 'asset', src: f, out: join(DIST, relative(src, f)) });
  }
  const fixtures = join(ROOT, 'test', 'fixtures');
  for (const f of filesUnder(fixtures)) {
    if (f.endsWith('.ts')) out.push({ kind: 'fixture', src: f, out: join(FIXTURES_OUT, relative(fixtures, f)).replace(/\.ts$/, '.js') });
  }
  return out;
}

/** What every output depends on besides its own source: the compiler, its options and this file. */
function buildKey(): string {
  const inputs = ['tsconfig.json', 'tsconfig.build.json', 'node_modules/typescript/package.json', 'scripts/dist.ts'];
  return sha(inputs.map((f) => readFileSync(join(ROOT, f), 'utf8')).join('\0'));
}

function readManifest(key: string): Manifest {
  try {
    const m = JSON.parse(readFileSync(MANIFEST, 'utf8')) as Manifest;
    if (m.key === key && m.outputs) return m;
  } catch {
    /* absent or unreadable: everything is rebuilt */
  }
  return { key, outputs: {} };
}

/** Replaces `path` whole (write, then rename): a reader sees the old file or the new one. */
function writeWhole(path: string, data: string | Buffer): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, data);
  renameSync(tmp, path);
}

type Transpile = (source: string, file: string) => string;

/** TypeScript's per-file emitter with tsconfig.build.json's options (loaded only when something is stale). */
function transpiler(): Transpile {
  const ts = createRequire(import.meta.url)('typescript') as typeof import('typescript');
  const parsed = ts.getParsedCommandLineOfConfigFile(
    join(ROOT, 'tsconfig.build.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
      },
    },
  );
  if (!parsed) throw new Error('tsconfig.build.json: unreadable');
  // A single file cannot see package.json's "type": "module", under which NodeNext emits ES modules.
  const compilerOptions = {
    ...parsed.options,
    declaration: false,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
  };
  return (source, fileName) => ts.transpileModule(source, { compilerOptions, fileName }).outputText;
}

/** A fixture's imports of src/ pointed at dist/; any other relative import would break, so it throws. */
function relink(js: string, file: string): string {
  const out = js.replace(/(\bfrom\s+|\bimport\(\s*)(['"])\.\.\/\.\.\/src\//g, '$1$2../../');
  const stray = /(?:\bfrom\s+|\bimport\(\s*)['"](\.{1,2}\/[^'"]*)['"]/g;
  for (const m of out.matchAll(stray)) {
    if (!m[1]!.startsWith('../../') || m[1]!.startsWith('../../../'))
      throw new Error(`${file}: a fixture may import only from src/ (found ${m[1]})`);
  }
  return out;
}

/** Brings dist/ up to date with src/ and test/fixtures/ (see the file's comment). */
export function buildForTests(): BuildResult {
  const started = Date.now();
  const key = buildKey();
  const manifest = readManifest(key);
  const next: Manifest = { key, outputs: {} };
  let transpile: Transpile | undefined;
  let written = 0;
  for (const job of jobs()) {
    const source = readFileSync(job.src);
    const srcHash = sha(source);
    const rel = posix(relative(DIST, job.out));
    const had = manifest.outputs[rel];
    if (had && had.src === srcHash && existsSync(job.out) && sha(readFileSync(job.out)) === had.out) {
      next.outputs[rel] = had;
      continue;
    }
    let data: string | Buffer = source;
    if (job.kind !== 'asset') {
      transpile ??= transpiler();
      const js = transpile(source.toString('utf8'), job.src);
      data = job.kind === 'fixture' ? relink(js, job.src) : js;
    }
    writeWhole(job.out, data);
    next.outputs[rel] = { src: srcHash, out: sha(data) };
    written++;
  }
  // What no current source produces: a deleted module must not stay importable. Declarations
  // (`npm run build` writes them) and another run's files being written are left alone.
  let removed = 0;
  for (const f of filesUnder(DIST)) {
    const rel = posix(relative(DIST, f));
    if (next.outputs[rel] || f === MANIFEST || f.endsWith('.d.ts') || f.endsWith('.tmp')) continue;
    rmSync(f, { force: true });
    removed++;
  }
  writeWhole(MANIFEST, JSON.stringify(next));
  checkAssetImports();
  return { written, removed, ms: Date.now() - started };
}

/**
 * Every relative import of a copied JavaScript asset (a worker thread's file) resolves in dist/:
 * a plain .js file that only an asset imports is an asset too, and forgetting it in RUNTIME_ASSETS
 * would otherwise show only as a worker thread dying in a child process.
 */
function checkAssetImports(): void {
  for (const job of jobs()) {
    if (job.kind !== 'asset' || !job.out.endsWith('.js')) continue;
    const text = readFileSync(job.out, 'utf8');
    for (const m of text.matchAll(/(?:\bfrom\s+|\bimport\(\s*)['"](\.{1,2}\/[^'"]+)['"]/g)) {
      if (!existsSync(join(dirname(job.out), m[1]!)))
        throw new Error(
          `${posix(relative(ROOT, job.src))} imports ${m[1]}, which is not in dist/: add it to RUNTIME_ASSETS in scripts/dist.ts`,
        );
    }
  }
}

/** The compiled fixture `name` (test/fixtures/<name>.ts). */
export function fixtureJs(name: string): string {
  return join(FIXTURES_OUT, `${name}.js`);
}
