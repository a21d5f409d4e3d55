/**
 * Defaults and the environment. Each timing constant says which failure its value trades away.
 */
import { hostname } from 'node:os';
import { resolve } from 'node:path';

export const DEFAULTS = Object.freeze({
  /** Agent seats when none are given: one task at a time is the safe default for an agent box. */
  maxParallel: 1,
  maxBacklog: 100,
  timeoutSeconds: 900,
  /**
   * Lease TTL. Shorter detects a dead worker sooner but lets a GC pause or a slow network look
   * like death (and causes a re-delivery); 30 s with heartbeats every TTL/3 tolerates ~20 s stalls.
   */
  leaseTtlSeconds: 30,
  /** Re-deliveries after the first attempt before a task is parked as `poisoned`. */
  maxRedeliveries: 3,
  /**
   * How often the reaper runs (±20 % jitter). A lapsed lease is noticed within one interval; the
   * canary's E-01 grace is derived from it (two intervals), so do not change one without the other.
   */
  reaperIntervalMs: 2_000,
  /** A running task asked to cancel gets this long to stop on its own before it is forced. */
  cancelGraceMs: 30_000,
  /** Queued longer than this is failed as `backlog_expired`: nobody is serving the agent. */
  backlogExpiryMs: 24 * 60 * 60 * 1000,
  /** Long-poll claim wait when the worker does not say. Below common 30 s proxy idle timeouts. */
  claimWaitMs: 25_000,
  claimWaitMaxMs: 60_000,
  /**
   * A waiting claim re-checks the queue this often even without a wake-up signal. It bounds the
   * delay when a signal is lost (listener reconnecting) or a `run_after` comes due.
   */
  claimPollMs: 1_000,
  /** Task payload limit (serialised JSON). */
  payloadLimitBytes: 256 * 1024,
  port: 7070,
  host: '127.0.0.1',
});

export interface Env {
  dataDir: string;
  databaseUrl?: string;
  port: number;
  host: string;
}

export function readEnv(env: NodeJS.ProcessEnv = process.env): Env {
  return {
    dataDir: resolve(env.BATON_DATA_DIR ?? '.baton'),
    databaseUrl: env.BATON_DATABASE_URL || undefined,
    port: env.BATON_PORT ? Number(env.BATON_PORT) : DEFAULTS.port,
    host: env.BATON_HOST ?? DEFAULTS.host,
  };
}

/** Identifies this process in lease owners and event actors. */
export function defaultNodeId(): string {
  return `node:${hostname()}:${process.pid}`;
}

/**
 * Retention (docs/operations.md, "Sizing and retention"). Read by `baton up` and the CLI; a bad
 * value throws a message naming the variable, so `baton up` stops before serving.
 */
export interface RetentionEnv {
  /** BATON_RETENTION_DAYS: terminal executions older than this go (default 30; 0 keeps everything). */
  retentionDays: number;
  /** BATON_AUDIT_RETENTION_DAYS: audit rows older than this go (default 365; 0 keeps everything). */
  auditRetentionDays: number;
  /** BATON_ARCHIVE_DIR: pruned executions are appended here first (gzip JSON lines); unset: no archive. */
  archiveDir?: string;
}

export const RETENTION_DEFAULTS = Object.freeze({ retentionDays: 30, auditRetentionDays: 365 });

/** Days are a non-negative number (fractions allowed: 0.5 is twelve hours), at most 100 years. */
function days(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const n = Number(raw.trim());
  if (!/^\d+(\.\d+)?$/.test(raw.trim()) || !Number.isFinite(n) || n > 36_500) {
    throw new Error(`${name} must be a number of days from 0 to 36500 (0 keeps everything); got '${raw}'`);
  }
  return n;
}

export function readRetentionEnv(env: NodeJS.ProcessEnv = process.env): RetentionEnv {
  const dir = env.BATON_ARCHIVE_DIR;
  if (dir !== undefined && dir.trim() === '' && dir !== '') throw new Error('BATON_ARCHIVE_DIR must be a directory path; got only spaces');
  return {
    retentionDays: days(env, 'BATON_RETENTION_DAYS', RETENTION_DEFAULTS.retentionDays),
    auditRetentionDays: days(env, 'BATON_AUDIT_RETENTION_DAYS', RETENTION_DEFAULTS.auditRetentionDays),
    archiveDir: dir ? resolve(dir) : undefined,
  };
}
