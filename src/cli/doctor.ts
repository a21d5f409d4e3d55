import type { Command } from 'commander';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ApiError, Unreachable } from '../client.ts';
import { readEnv, readRetentionEnv, type Env } from '../config.ts';
import type { HistoryStats } from '../api/schemas/history.ts';
import type { StoreAdapter, StoreCheck } from '../store/adapter.ts';
import { connect, type ConnectionFlags } from './connection.ts';
import { EXIT } from './exit.ts';
import { relativeTime, table } from './output.ts';

/** One line of the doctor's answer; the store's own checks (StoreAdapter.settingChecks) have the same shape. */
export type Check = StoreCheck;

/** The store this machine is configured for, read directly (never migrated or written). */
async function checkStore(dataDir: string, env: Env): Promise<Check[]> {
  const url = env.databaseUrl;
  if (!url) {
    const file = join(dataDir, 'baton.sqlite');
    if (!existsSync(file))
      return [{ check: 'store', status: 'skip', detail: `no local SQLite store at ${file}; checked through the server only` }];
  }
  let store;
  try {
    const schema = env.pgSchema;
    const [{ openStore }, { sql }] = await Promise.all([import('../store/open.ts'), import('kysely')]);
    store = openStore({ databaseUrl: url, dataDir, schema, poolMax: 1 });
    await sql`SELECT 1`.execute(store.db);
    const where = url ? 'PostgreSQL' : `SQLite ${join(dataDir, 'baton.sqlite')}`;
    const missingSetup = await store.missingSetup();
    if (missingSetup)
      return [
        { check: 'store', status: 'ok', detail: `${where} answers` },
        { check: 'migrations', status: 'fail', detail: `${missingSetup} (run \`baton migrate\`)` },
      ];
    const { applied, known } = await store.migrationStatus();
    const missing = known.filter((v) => !applied.includes(v));
    const unknown = applied.filter((v) => !known.includes(v));
    const checks: Check[] = [{ check: 'store', status: 'ok', detail: `${where} answers` }];
    if (missing.length)
      checks.push({ check: 'migrations', status: 'fail', detail: `not applied: ${missing.join(', ')} (run \`baton migrate\`)` });
    else if (unknown.length)
      checks.push({
        check: 'migrations',
        status: 'warn',
        detail: `the database has migrations this version does not know (${unknown.join(', ')}): a newer baton wrote it`,
      });
    else checks.push({ check: 'migrations', status: 'ok', detail: `current (version ${Math.max(0, ...applied)})` });
    checks.push(...(await store.settingChecks()));
    if (!missing.length) checks.push(...(await checkHistory(store)));
    return checks;
  } catch (err) {
    return [{ check: 'store', status: 'fail', detail: `cannot read the store: ${(err as Error)?.message ?? err}` }];
  } finally {
    await store?.close().catch(() => undefined);
  }
}

const fmt = (n: number) => n.toLocaleString('en-US');
const count = (n: number | null) => (n === null ? '?' : `~${fmt(n)}`);
const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;

/**
 * History size, oldest rows, retention settings and the last prune, read from the store directly
 * (estimates; no table scans). The settings are this shell's environment: when the server answers
 * GET /v1/history, runDoctor puts its own figures and settings in their place.
 */
async function checkHistory(store: StoreAdapter): Promise<Check[]> {
  let settings;
  try {
    settings = readRetentionEnv();
  } catch (err) {
    return [{ check: 'retention', status: 'fail', detail: (err as Error).message }];
  }
  // Loaded here, not at the top: every `baton` command loads this file, and these reach Kysely.
  const [{ readHistoryStats }, { historyView }] = await Promise.all([import('../retention/stats.ts'), import('../api/routes/history.ts')]);
  return historyChecks(historyView(await readHistoryStats(store, settings)), "this shell's settings: the server was not asked");
}

/** The `history` and `retention` rows from GET /v1/history's answer (or the same read locally); `whose` says where the settings come from. */
function historyChecks(s: HistoryStats, whose: string): Check[] {
  const r = s.rows;
  const free = s.free_bytes ? ` (${mib(s.free_bytes)} free, returned by the pruner's incremental vacuum)` : '';
  const checks: Check[] = [
    {
      check: 'history',
      status: 'ok',
      detail: `${count(r.executions)} executions, ${count(r.execution_events)} events, ${count(r.execution_logs)} log lines, ${count(r.audit_log)} audit rows (estimates); ${mib(s.bytes)}${free}; oldest finished ${relativeTime(s.oldest_completed_at)}, oldest created ${relativeTime(s.oldest_created_at)}`,
    },
  ];
  const window = s.retention.days > 0 ? `executions ${s.retention.days} d` : 'executions kept forever (BATON_RETENTION_DAYS=0)';
  const audit = s.retention.audit_days > 0 ? `audit ${s.retention.audit_days} d` : 'audit kept forever';
  const archive = s.retention.archive_dir ? `archive ${s.retention.archive_dir}` : 'no archive';
  const p = s.last_prune;
  const last =
    p.completed_at === null
      ? 'never pruned'
      : `last prune ${relativeTime(p.completed_at)}: ${fmt(p.executions ?? 0)} executions, ${fmt(p.audit ?? 0)} audit rows in ${((p.duration_ms ?? 0) / 1000).toFixed(1)} s (all time ${fmt(p.total_executions)}, ${fmt(p.total_audit)})`;
  const detail = `${window}, ${audit}, ${archive} (${whose}); ${last}`;
  // A day of slack past the window: the pruner sweeps every 10 minutes when a baton up runs it.
  const oldest = s.oldest_completed_at === null ? null : Date.parse(s.oldest_completed_at);
  const overdue = s.retention.days > 0 && oldest !== null && oldest < Date.now() - (s.retention.days + 1) * 86_400_000;
  if (p.error) checks.push({ check: 'retention', status: 'warn', detail: `${detail}; the last sweep failed: ${p.error}` });
  else if (overdue)
    checks.push({
      check: 'retention',
      status: 'warn',
      detail: `${detail}; finished executions older than the window remain (a retry chain still running, an open violation's subject, or no baton up is pruning)`,
    });
  else checks.push({ check: 'retention', status: 'ok', detail });
  return checks;
}

/**
 * The data directory and what it holds — the SQLite database (payloads, results, logs, push URLs)
 * and the key files — must not be readable by other users: the directory 0700, the files 0600.
 */
export function checkFileModes(dataDir: string): Check {
  const paths = [
    dataDir,
    ...['baton.sqlite', 'baton.sqlite-wal', 'baton.sqlite-shm', 'admin.key', 'secret.key'].map((f) => join(dataDir, f)),
  ].filter((p) => existsSync(p));
  if (paths.length === 0) return { check: 'file modes', status: 'skip', detail: `no data directory at ${dataDir}` };
  const loose = paths.filter((p) => (statSync(p).mode & 0o077) !== 0).map((p) => `${p} (${(statSync(p).mode & 0o777).toString(8)})`);
  if (loose.length === 0) return { check: 'file modes', status: 'ok', detail: `${dataDir} and its files are private to their owner` };
  return {
    check: 'file modes',
    status: 'warn',
    detail: `readable or writable by others: ${loose.join(', ')} — chmod 700 ${dataDir} && chmod 600 ${dataDir}/*`,
  };
}

/** Read-only checks of a deployment: store, migrations, file modes, server, key, canary. */
export async function runDoctor(o: ConnectionFlags): Promise<Check[]> {
  const env = readEnv();
  const dataDir = o.dataDir ?? env.dataDir;
  const checks: Check[] = await checkStore(dataDir, env);
  checks.push(checkFileModes(dataDir));
  const c = connect(o);
  try {
    const r = await fetch(`${c.server}/readyz`);
    const body = (await r.json().catch(() => ({}))) as { status?: string; store?: string; message?: string };
    checks.push(
      r.ok
        ? { check: 'server', status: 'ok', detail: `${c.server} ready (${body.store ?? 'store'})` }
        : {
            check: 'server',
            status: 'fail',
            detail: `${c.server} not ready: ${body.status ?? r.status}${body.message ? ` — ${body.message}` : ''}`,
          },
    );
  } catch (err) {
    checks.push({ check: 'server', status: 'fail', detail: new Unreachable(c.server, (err as any)?.cause ?? err).message });
    return checks;
  }
  try {
    await c.listAgents();
    checks.push({ check: 'api key', status: 'ok', detail: 'accepted' });
  } catch (err) {
    checks.push({ check: 'api key', status: 'fail', detail: err instanceof ApiError ? `${err.code}: ${err.message}` : String(err) });
    return checks;
  }
  // The server's own history figures and retention settings, in place of this shell's (an agent key may not read them).
  try {
    const server = historyChecks((await c.request<HistoryStats>('GET', '/v1/history')).body, "the server's settings");
    const at = checks.findIndex((x) => x.check === 'history' || x.check === 'retention');
    const rest = checks.filter((x) => x.check !== 'history' && x.check !== 'retention');
    rest.splice(at < 0 ? rest.length : at, 0, ...server);
    checks.splice(0, checks.length, ...rest);
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
  }
  try {
    const r = await c.request<{ status: string; open_count: number; last_completed_at: string | null }>('GET', '/v1/canary');
    const s = r.body;
    const when = `last check ${relativeTime(s.last_completed_at)}`;
    if (s.status === 'healthy') checks.push({ check: 'canary', status: 'ok', detail: `healthy, ${when}` });
    else if (s.status === 'violated')
      checks.push({ check: 'canary', status: 'fail', detail: `${s.open_count} open violation(s), ${when} (see \`baton canary status\`)` });
    else if (s.status === 'stale')
      checks.push({
        check: 'canary',
        status: 'fail',
        detail: `stale: no cycle finished recently (${when}); is any baton process running the canary?`,
      });
    else checks.push({ check: 'canary', status: 'warn', detail: s.status });
  } catch (err) {
    if (err instanceof ApiError && err.status === 404 && err.message.startsWith('no route'))
      checks.push({ check: 'canary', status: 'skip', detail: 'this server has no canary' });
    else if (err instanceof ApiError && err.code === 'forbidden')
      checks.push({ check: 'canary', status: 'skip', detail: 'this key may not read the canary' });
    else checks.push({ check: 'canary', status: 'fail', detail: err instanceof ApiError ? `${err.code}: ${err.message}` : String(err) });
  }
  return checks;
}

export function registerDoctorCommands(program: Command): void {
  program
    .command('doctor')
    .description('read-only checks: store reachable, migrations current, server ready, key accepted, canary state; exits 1 on a problem')
    .action(async (_o, cmd: Command) => {
      const o = cmd.optsWithGlobals() as ConnectionFlags & { json?: boolean };
      const checks = await runDoctor(o);
      const failed = checks.filter((c) => c.status === 'fail');
      if (o.json) process.stdout.write(JSON.stringify({ ok: failed.length === 0, checks }, null, 2) + '\n');
      else
        process.stdout.write(
          table(
            checks.map((c) => ({ ...c, status: c.status.toUpperCase() })),
            ['check', 'status', 'detail'],
          ) + '\n',
        );
      if (failed.length)
        process.stderr.write(`error: ${failed.length} problem(s): ${failed.map((c) => `${c.check}: ${c.detail}`).join('; ')}\n`);
      process.exitCode = failed.length ? EXIT.error : EXIT.ok;
    });
}
