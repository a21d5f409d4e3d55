import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dumpSchema, migrateLegacy, type LegacyTarget } from '../../scripts/schema-dump.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { loadLegacyMigrations, loadMigrations } from '../../src/store/migrations.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { openSqlite } from '../../src/store/sqlite.ts';
import { PG_URL, STORE_KIND } from '../helpers/store.ts';

/**
 * A store made by any release before the baseline opens on this one with nothing lost: migrated
 * by the legacy chain up to a version, given rows then, and opened by today's migrate(), it keeps
 * every row and ends with exactly the schema a fresh store gets from the baseline.
 */

const dir = mkdtempSync(join(tmpdir(), 'baton-mig-legacy-'));
const schemas: string[] = [];
const opened: StoreAdapter[] = [];
const tag = `${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;

function target(name: string): LegacyTarget {
  if (STORE_KIND === 'sqlite') return { kind: 'sqlite', file: join(dir, `${name}.sqlite`) };
  const schema = `t_legacy_${tag}_${name}`;
  schemas.push(schema);
  return { kind: 'postgres', url: PG_URL, schema };
}

function open(t: LegacyTarget): StoreAdapter {
  const store = t.kind === 'sqlite' ? openSqlite(t.file) : openPostgres({ url: t.url, schema: t.schema, poolMax: 2 });
  opened.push(store);
  return store;
}

afterAll(async () => {
  await Promise.all(opened.map((s) => s.close()));
  rmSync(dir, { recursive: true, force: true });
  if (schemas.length === 0) return;
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  for (const s of schemas) await client.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
  await client.end();
});

/** Plain SQL valid at legacy version 10 and every later one, on both dialects. */
const ROWS_AT_10 = `
INSERT INTO agents (name, max_parallel, max_backlog, timeout_seconds, lease_ttl_seconds, max_redeliveries, delivery, push_url,
                    description, created_at, updated_at, push_secret, retry_policy, paused_at, paused_by, paused_reason, last_claim_at)
VALUES ('pull-agent', 2, 100, 60, 30, 3, 'pull', NULL, 'made before the baseline', 1000, 1000, NULL, '{"max_attempts":3}', NULL, NULL, NULL, 5000),
       ('push-agent', 1, 10, 120, 45, 0, 'push', 'https://example.test/hook', NULL, 1000, 2000, 'enc:secret', NULL, 3000, 'ops', 'maintenance', NULL);
INSERT INTO executions (id, agent, trigger_kind, origin, message, payload, priority, status, attempt, max_redeliveries, timeout_seconds,
                        lease_ttl_seconds, lease_owner, lease_token, lease_expires_at, heartbeat_at, deadline_at, created_at, queued_at,
                        started_at, completed_at, duration_ms, result, error_code, error_message, usage, changed_at, changed_by, change_reason)
VALUES ('ex-queued', 'pull-agent', 'api', 'api', 'hello', '{"n":1}', 0, 'queued', 0, 3, 60, 30, NULL, NULL, NULL, NULL, NULL, 1100, 1100,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1100, 'key:admin', NULL),
       ('ex-running', 'pull-agent', 'manual', 'cli', 'work', '{}', 5, 'running', 1, 3, 60, 30, 'worker-1', 'tok-1', 99000, 1300, 61200,
        1200, 1200, 1200, NULL, NULL, NULL, NULL, NULL, NULL, 1200, 'worker-1', 'claimed'),
       ('ex-succeeded', 'pull-agent', 'schedule', 'schedule:s1', 'tick', '{}', 0, 'succeeded', 1, 3, 60, 30, NULL, NULL, NULL, NULL, NULL,
        1000, 1000, 1010, 1500, 490, '{"ok":true}', NULL, NULL, '{"tokens":12}', 1500, 'worker-1', NULL),
       ('ex-failed', 'push-agent', 'webhook', 'webhook:w1', 'boom', '{}', 0, 'failed', 1, 0, 120, 45, NULL, NULL, NULL, NULL, NULL,
        1000, 1000, 1020, 1600, 580, NULL, 'worker_error', 'it broke', NULL, 1600, 'worker-2', 'failed'),
       ('ex-cancelled', 'push-agent', 'mcp', 'mcp', 'never mind', '{}', 0, 'cancelled', 0, 0, 120, 45, NULL, NULL, NULL, NULL, NULL,
        1000, 1000, NULL, 1700, NULL, NULL, NULL, NULL, NULL, 1700, 'key:admin', 'cancelled by an operator');
INSERT INTO schedules (id, agent, name, cron, timezone, message, payload, enabled, overlap_policy, misfire_policy, misfire_grace_seconds,
                       retry_policy, priority, next_run_at, last_run_at, created_at, updated_at)
VALUES ('s1', 'pull-agent', 'nightly', '0 3 * * *', 'Europe/Paris', 'tick', '{}', 1, 'skip', 'run_once', 60, NULL, 0, 90000, 1000, 900, 1000),
       ('s2', 'push-agent', 'off', '*/5 * * * *', 'UTC', 'tock', '{}', 0, 'queue', 'skip', 0, NULL, 1, NULL, NULL, 900, 900);
INSERT INTO api_keys (id, name, secret_hash, scope, agent, created_at, revoked_at)
VALUES ('k1', 'admin', 'hash-1', 'admin', NULL, 800, NULL), ('k2', 'worker', 'hash-2', 'agent', 'pull-agent', 800, 900);
INSERT INTO audit_log (at, actor, action, subject, execution_id, detail)
VALUES (1000, 'key:admin', 'agent.create', 'pull-agent', NULL, '{"max_parallel":2}'),
       (1700, 'key:admin', 'execution.cancel', 'push-agent', 'ex-cancelled', NULL);
`;

/** The rows each table held, keyed for comparison. */
const TABLES: Record<string, string> = {
  agents: 'name',
  executions: 'id',
  execution_events: 'id',
  schedules: 'id',
  api_keys: 'id',
  audit_log: 'id',
};

async function snapshot(store: StoreAdapter): Promise<Record<string, Record<string, unknown>[]>> {
  const out: Record<string, Record<string, unknown>[]> = {};
  for (const [table, key] of Object.entries(TABLES))
    out[table] = (await sql.raw<Record<string, unknown>>(`SELECT * FROM ${table} ORDER BY ${key}`).execute(store.db)).rows;
  return out;
}

/** `after`'s rows cut to the columns `before` had: what the store held at the old version, as it is now. */
function asBefore(before: Record<string, Record<string, unknown>[]>, after: Record<string, Record<string, unknown>[]>) {
  return Object.fromEntries(
    Object.entries(after).map(([table, rows]) => {
      const columns = Object.keys(before[table]![0] ?? {});
      return [table, rows.map((r) => Object.fromEntries(columns.map((c) => [c, r[c]])))];
    }),
  );
}

const STOPS = STORE_KIND === 'postgres' ? [10, 20, 34] : [10, 17, 24];

describe(`stores made before the baseline (${STORE_KIND})`, () => {
  let fresh = '';
  const line = loadMigrations(STORE_KIND).map((m) => m.version);

  beforeAll(async () => {
    const store = open(target('fresh'));
    await store.migrate();
    fresh = await dumpSchema(store);
  });

  it('the last stop is the whole legacy chain', () => {
    expect(STOPS.at(-1)).toBe(loadLegacyMigrations(STORE_KIND).at(-1)!.version);
  });

  for (const stop of STOPS) {
    it(`a store migrated to legacy ${stop} keeps every row and ends with the baseline's schema`, async () => {
      const t = target(`at${stop}`);
      await migrateLegacy(t, stop, ROWS_AT_10);
      const store = open(t);
      const before = await snapshot(store);
      expect(before.executions).toHaveLength(5);
      expect(before.execution_events!.length).toBeGreaterThanOrEqual(5);

      const applied = await store.migrate();
      const legacyLeft = loadLegacyMigrations(STORE_KIND)
        .map((m) => m.version)
        .filter((v) => v > stop);
      expect(applied).toEqual([...legacyLeft, ...line]);
      expect(await store.migrationStatus()).toEqual({ applied: line, known: line });
      expect(await store.migrate()).toEqual([]);

      const after = await snapshot(store);
      expect(asBefore(before, after)).toEqual(before);
      expect(await dumpSchema(store)).toBe(fresh);
    });
  }

  it('several processes upgrading one old store at once run each step once', async () => {
    const t = target('racing');
    await migrateLegacy(t, STOPS[0]!, ROWS_AT_10);
    const stores = [open(t), open(t), open(t)];
    const results = await Promise.all(stores.map((s) => s.migrate()));
    expect(results.filter((r) => r.length > 0)).toHaveLength(1);
    for (const s of stores) expect(await s.migrationStatus()).toEqual({ applied: line, known: line });
    expect(await dumpSchema(stores[0]!)).toBe(fresh);
  });
});
