import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
export const REPO = fileURLToPath(new URL('../..', import.meta.url));

/** One packed package: its tarball and the paths `npm pack` put in it. */
export interface Packed {
  tarball: string;
  files: string[];
}

/** The two tarballs and a fresh project (no workspace links) with both installed from them. */
export interface Installed {
  server: Packed;
  sdk: Packed;
  /** The consumer project: package.json ("type": "module") and node_modules/{baton,@baton/sdk}. */
  project: string;
}

/** What the tarballs are made of: a change to any of these packs and installs again. */
const INPUTS = [
  'src',
  'bin',
  'web',
  'packages/sdk',
  'scripts',
  'package.json',
  'package-lock.json',
  'tsconfig.json',
  'tsconfig.build.json',
  'README.md',
  'LICENSE',
];
const SKIP = new Set(['node_modules', 'dist']);

/** The inputs copied to `to`, and a link to this checkout's node_modules: a tree `npm pack` can build in. */
function copyInputs(to: string): string {
  for (const input of INPUTS) {
    if (!existsSync(join(REPO, input))) continue;
    cpSync(join(REPO, input), join(to, input), { recursive: true, filter: (src) => !SKIP.has(basename(src)) });
  }
  symlinkSync(join(REPO, 'node_modules'), join(to, 'node_modules'), 'dir');
  return to;
}

function hashInputs(): string {
  const h = createHash('sha256');
  const walk = (rel: string) => {
    const abs = join(REPO, rel);
    if (!existsSync(abs)) return;
    if (statSync(abs).isDirectory()) {
      for (const name of readdirSync(abs).sort()) if (!SKIP.has(name)) walk(join(rel, name));
    } else {
      h.update(rel + '\0')
        .update(readFileSync(abs))
        .update('\0');
    }
  };
  for (const input of INPUTS) walk(input);
  return h.digest('hex').slice(0, 16);
}

/**
 * npm, without what `npm test` put in this process's environment: an inherited npm_config_* or
 * npm_package_* would make the consumer project's install behave like the repository's.
 */
async function npm(args: string[], cwd: string): Promise<string> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
  const { stdout } = await run('npm', args, { cwd, env, maxBuffer: 64 * 1024 * 1024, timeout: 8 * 60_000 });
  return stdout;
}

async function pack(source: string, cwdArgs: string[], dest: string): Promise<Packed> {
  const out = JSON.parse(await npm(['pack', '--json', '--pack-destination', dest, ...cwdArgs], source)) as {
    filename: string;
    files: { path: string }[];
  }[];
  return { tarball: join(dest, out[0]!.filename), files: out[0]!.files.map((f) => f.path) };
}

/**
 * The install of an earlier build, if one finished: its node_modules seeds the new project, so
 * npm only swaps the two tarballs instead of unpacking everything again. The first install on a
 * machine is from nothing; every install resolves
 * the tarballs' dependencies again, so a dependency added to package.json is still installed.
 */
function previousInstall(root: string, except: string): string | undefined {
  return readdirSync(root)
    .map((name) => join(root, name))
    .filter((d) => d !== except && existsSync(join(d, 'installed.json')))
    .sort((a, b) => statSync(join(b, 'installed.json')).mtimeMs - statSync(join(a, 'installed.json')).mtimeMs)[0];
}

function seedSqliteBinding(project: string): void {
  const ours = join(REPO, 'node_modules/better-sqlite3');
  const theirs = join(project, 'node_modules/better-sqlite3');
  if (existsSync(join(theirs, 'build/Release/better_sqlite3.node'))) return;
  const version = (dir: string) => (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string }).version;
  if (version(ours) !== version(theirs))
    throw new Error(`better-sqlite3 ${version(theirs)} installed, but this checkout has ${version(ours)}`);
  cpSync(join(ours, 'build'), join(theirs, 'build'), { recursive: true });
}

async function build(root: string, dir: string): Promise<Installed> {
  rmSync(dir, { recursive: true, force: true });
  const tarballs = join(dir, 'tarballs');
  const project = join(dir, 'project');
  mkdirSync(tarballs, { recursive: true });
  mkdirSync(project, { recursive: true });
  // `npm pack` runs prepack (scripts/build.ts: both packages) and prepare (the dashboard), which
  // write dist/ and web/dist: it packs a copy of the inputs (with this checkout's node_modules),
  // so the checkout the other test files run from is never rewritten under them.
  const source = copyInputs(join(dir, 'source'));
  const server = await pack(source, [], tarballs);
  const sdk = await pack(source, ['--workspace', 'packages/sdk'], tarballs);
  rmSync(source, { recursive: true, force: true });
  // A project as a user would start one (a user approves better-sqlite3's install script, which
  // builds its binding; see README).
  writeFileSync(
    join(project, 'package.json'),
    JSON.stringify({ name: 'baton-consumer', private: true, type: 'module', allowScripts: { 'better-sqlite3': true } }, null, 2),
  );
  // @types/node: a TypeScript consumer of a Node library has it; the SDK's declarations name Node's types.
  const seed = previousInstall(root, dir);
  if (seed) cpSync(join(seed, 'project/node_modules'), join(project, 'node_modules'), { recursive: true, verbatimSymlinks: true });
  const typesNode = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> })
    .devDependencies['@types/node']!;
  // Install scripts are skipped and better-sqlite3's binding is taken from this checkout's own
  // install (same version, same Node): with only the npm registry reachable it would otherwise
  // compile from source, minutes on a 2-core machine, and that compile is not what this tests.
  await npm(
    ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', server.tarball, sdk.tarball, `@types/node@${typesNode}`],
    project,
  );
  seedSqliteBinding(project);
  const installed: Installed = { server, sdk, project };
  writeFileSync(join(dir, 'installed.json'), JSON.stringify(installed));
  // Older installs are only seeds, and each is a few hundred MB: drop those not used for an hour
  // (a younger one may still serve the other store's project, packed before a source changed).
  for (const name of readdirSync(root)) {
    const other = join(root, name);
    const used = statSync(join(other, 'installed.json'), { throwIfNoEntry: false })?.mtimeMs ?? statSync(other).mtimeMs;
    if (other !== dir && name !== 'lock' && Date.now() - used > 3_600_000) rmSync(other, { recursive: true, force: true });
  }
  return installed;
}

/** False once the process that took `lock` has ended; true while it runs, or before it wrote its pid. */
function lockHolderAlive(lock: string): boolean {
  let pid: number;
  try {
    pid = Number(readFileSync(join(lock, 'pid'), 'utf8'));
  } catch {
    return true; // not written yet: the lock's age decides
  }
  if (!Number.isInteger(pid) || pid <= 0) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Pack both packages and install them into a fresh project, once per content of the sources:
 * the sqlite and postgres projects (and later runs on unchanged sources) share one install,
 * which takes a minute or two (npm resolves and unpacks every dependency).
 * A lock directory serialises the two projects so one builds while the other waits.
 */
export async function packAndInstall(): Promise<Installed> {
  const root = join(tmpdir(), 'baton-package-test');
  mkdirSync(root, { recursive: true });
  const dir = join(root, hashInputs());
  const lock = join(root, 'lock');
  const until = Date.now() + 15 * 60_000;
  for (;;) {
    if (existsSync(join(dir, 'installed.json'))) return JSON.parse(readFileSync(join(dir, 'installed.json'), 'utf8')) as Installed;
    try {
      mkdirSync(lock);
    } catch {
      // A lock whose process is gone (a run stopped mid-build), or older than the longest build,
      // belongs to a run that died: take it over.
      if (!lockHolderAlive(lock) || Date.now() - (statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now()) > 15 * 60_000)
        rmSync(lock, { recursive: true, force: true });
      if (Date.now() > until) throw new Error(`gave up waiting for ${lock}`);
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    try {
      writeFileSync(join(lock, 'pid'), String(process.pid));
      if (!existsSync(join(dir, 'installed.json'))) return await build(root, dir);
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
}

/** Every import specifier in the JavaScript files under `dir` (static, re-export and dynamic). */
export function importsUnder(dir: string): Map<string, string[]> {
  const found = new Map<string, string[]>();
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const abs = join(d, name);
      if (statSync(abs).isDirectory()) walk(abs);
      else if (name.endsWith('.js')) {
        const text = readFileSync(abs, 'utf8');
        for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm)) {
          found.set(m[1]!, [...(found.get(m[1]!) ?? []), relative(dir, abs)]);
        }
      }
    }
  };
  walk(dir);
  return found;
}
