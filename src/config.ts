/**
 * Defaults and the environment. Every BATON_* variable `baton up` and the CLI read is read here
 * and nowhere else; other modules receive the values as options. A bad value throws a ConfigError
 * whose one-line message names the variable and what it accepts, so `baton up` stops before it
 * serves. docs/operations.md ("Environment variables") lists the same variables (a test checks).
 * Each timing constant says which failure its value trades away.
 */
import { existsSync, statSync } from 'node:fs';
import { isIP } from 'node:net';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { CONTRACT_DEFAULTS } from './domain/defaults.ts';
import { ConfigError, MAX_TIMER_MS, httpUrl, mib, number, oneOf, shown, text, type Vars } from './config-values.ts';

export { ConfigError, type Vars };

export const DEFAULTS = Object.freeze({
  /** Agent settings, the claim wait and the payload limit: the wire contract documents them (src/domain/defaults.ts). */
  ...CONTRACT_DEFAULTS,
  /**
   * How often the reaper runs (±20 % jitter). A lapsed lease is noticed within one interval; the
   * canary's E-01 grace is derived from it (two intervals), so do not change one without the other.
   */
  reaperIntervalMs: 2_000,
  /** A running task asked to cancel gets this long to stop on its own before it is forced. */
  cancelGraceMs: 30_000,
  /** Queued longer than this is failed as `backlog_expired`: nobody is serving the agent. */
  backlogExpiryMs: 24 * 60 * 60 * 1000,
  /**
   * A waiting claim re-checks the queue this often even without a wake-up signal. It bounds the
   * delay when a signal is lost (listener reconnecting) or a `run_after` comes due.
   */
  claimPollMs: 1_000,
  port: 7070,
  host: '127.0.0.1',
  dataDir: '.baton',
  logLevel: 'info' as LogLevel,
  /**
   * How long an Idempotency-Key remembers its first answer. A client still retrying after this
   * gets a second execution; longer keeps more rows (the scheduler purges expired keys).
   */
  idempotencyTtlHours: 24,
  /**
   * A request whose key is still in flight waits this long for the first one's answer (then
   * replays it) before answering 409 idempotency_in_flight: it covers concurrent retries of one call.
   */
  idempotencyWaitMs: 5_000,
  /**
   * Open connections (through a trusted proxy: open requests) one client address may hold. A
   * `baton worker` holds one long-poll per claim loop plus a few for reports; 256 leaves room for
   * a fleet behind one NAT address, while a flood from one address cannot take every descriptor.
   */
  maxConnectionsPerAddress: 256,
  /** Webhook deliveries per second (burst twice that), per source address and per webhook, per process. */
  hookRatePerSecond: 50,
  /**
   * How often the canary runs. A cycle reads the events since its checkpoints and the non-terminal
   * rows: its cost follows activity (and the backlog), not the age of the database.
   */
  canaryIntervalMs: 60_000,
  /** A chained task deeper than this (its source's depth + 1) is refused and the refusal recorded: loops end. */
  chainDepthLimit: 10,
  /** Background passes traced (TRACE_PASSES): every pass would bury the traces of work under idle ones. */
  tracePasses: 'errors' as TracePasses,
  /**
   * Bytes of answers held in memory for clients that have not read them yet, in all (MiB): past it
   * the connections that read least recently are closed. Lower bounds the memory slow readers can
   * take; higher lets more large answers be in flight at once to clients reading slowly but surely.
   */
  maxUnreadMiB: 128,
  /**
   * The same for one connection (MiB): past it that connection is closed. Above the largest answer
   * Baton gives (a log page of 5 MiB, an execution of a few MiB), so it only stops a client that
   * asks again and again without reading.
   */
  maxUnreadMiBPerConnection: 32,
});

export const LOG_LEVELS = Object.freeze(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const);
export type LogLevel = (typeof LOG_LEVELS)[number];

/** How `baton up` writes its log lines: `pretty` for a person at a terminal, `json` lines for a collector. */
export const LOG_FORMATS = Object.freeze(['pretty', 'json'] as const);
export type LogFormat = (typeof LOG_FORMATS)[number];

/** Where the store is and where to listen: what `baton up` and the store commands (`migrate`, `export`, `doctor`) need. */
export interface Env {
  /** BATON_DATA_DIR: the SQLite file, admin.key and secret.key (default ./.baton, made absolute). */
  dataDir: string;
  /** BATON_DATABASE_URL: postgres://… selects PostgreSQL (or sqlite:FILE); unset: SQLite in the data dir. */
  databaseUrl?: string;
  /** BATON_PG_SCHEMA: the PostgreSQL schema to use, created if missing (unset: the connection's search_path). */
  pgSchema?: string;
  /** BATON_PORT: HTTP port; 0 lets the system pick one (default 7070). */
  port: number;
  /** BATON_HOST: HTTP listen address (default 127.0.0.1). */
  host: string;
}

export function readEnv(env: Vars = process.env): Env {
  const databaseUrl = text(env, 'BATON_DATABASE_URL');
  if (databaseUrl !== undefined && !/^(postgres(ql)?:\/\/|sqlite:)/.test(databaseUrl)) {
    // Only the scheme is shown: the rest may hold a password.
    throw new ConfigError(
      'BATON_DATABASE_URL',
      `BATON_DATABASE_URL must be a postgres:// (or postgresql://) URL, or sqlite: and a file path; got '${databaseUrl.split(':')[0]}:…'`,
    );
  }
  const pgSchema = text(env, 'BATON_PG_SCHEMA');
  if (pgSchema !== undefined && !/^[a-z_][a-z0-9_]*$/.test(pgSchema)) {
    throw new ConfigError(
      'BATON_PG_SCHEMA',
      `BATON_PG_SCHEMA must be a lower-case name (a-z, 0-9 and _, not starting with a digit); got ${shown(pgSchema)}`,
    );
  }
  return {
    dataDir: resolve(text(env, 'BATON_DATA_DIR') ?? DEFAULTS.dataDir),
    databaseUrl,
    pgSchema,
    port: number(env, 'BATON_PORT', DEFAULTS.port, {
      min: 0,
      max: 65_535,
      integer: true,
      accepts: 'a TCP port from 0 to 65535 (0: any free port)',
    }),
    host: listenHost(text(env, 'BATON_HOST')),
  };
}

/** BATON_HOST: an IP address, or a host name of letters, digits, hyphens and dots. */
function listenHost(raw: string | undefined): string {
  if (raw === undefined) return DEFAULTS.host;
  const name = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;
  if (isIP(raw) === 0 && !name.test(raw))
    throw new ConfigError('BATON_HOST', `BATON_HOST must be an IP address or a host name to listen on; got ${shown(raw)}`);
  return raw;
}

/** Where the CLI and `baton mcp` connect, and as whom (flags win over these). */
export interface ConnectionEnv {
  /** BATON_URL: the server (default http://<BATON_HOST>:<BATON_PORT>). */
  serverUrl?: string;
  /** BATON_API_KEY: the key (default <data dir>/admin.key of a local `baton up`). */
  apiKey?: string;
}

export function readConnectionEnv(env: Vars = process.env): ConnectionEnv {
  return { serverUrl: httpUrl(env, 'BATON_URL'), apiKey: text(env, 'BATON_API_KEY') };
}

/** Everything `baton up` reads, validated at once so a bad value stops it before it serves. */
export interface Config extends Env, ConnectionEnv {
  /** BATON_LOG_LEVEL: pino level of the log lines on stdout (default info). */
  logLevel: LogLevel;
  /** BATON_LOG_FORMAT: pretty or json; unset: pretty when stdout is a terminal, json otherwise (src/server/logger.ts). */
  logFormat?: LogFormat;
  /** BATON_SECRET_KEY: encrypts push signing secrets at rest (unset: <data dir>/secret.key, generated). */
  secretKey?: string;
  idempotency: IdempotencySettings;
  hookRates: HookRates;
  canary: CanarySettings;
  /** BATON_CHAIN_DEPTH_LIMIT: longest chain of subscriptions a task may end (default 10); deeper links are refused and recorded. */
  chainDepthLimit: number;
  unread: UnreadSettings;
  retention: RetentionEnv;
  telemetry: TelemetrySettings;
  network: NetworkSettings;
}

/** Who the client is, and how much of the server one client may hold. */
export interface NetworkSettings {
  /** BATON_MAX_CONNECTIONS_PER_ADDRESS: open connections (open requests through a trusted proxy) per client address (default 256). */
  maxConnectionsPerAddress: number;
  /** BATON_TRUSTED_PROXIES: the proxies whose X-Forwarded-For names the client (default: none, the header is ignored). */
  trustedProxies: TrustedProxy[];
}

/** One subnet of trusted proxies: a single address has the family's full prefix (32 or 128). */
export interface TrustedProxy {
  address: string;
  prefix: number;
  family: 'ipv4' | 'ipv6';
}

/** The names proxy-addr (Express, Fastify) gives these ranges, accepted in BATON_TRUSTED_PROXIES too. */
const PROXY_RANGES: Record<string, string[]> = {
  loopback: ['127.0.0.0/8', '::1/128'],
  linklocal: ['169.254.0.0/16', 'fe80::/10'],
  uniquelocal: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', 'fc00::/7'],
};

/** BATON_TRUSTED_PROXIES: addresses, CIDR subnets and the range names above, separated by commas or spaces. */
export function readTrustedProxies(env: Vars = process.env): TrustedProxy[] {
  const raw = text(env, 'BATON_TRUSTED_PROXIES') ?? '';
  return raw
    .split(/[\s,]+/)
    .filter(Boolean)
    .flatMap((entry) => PROXY_RANGES[entry.toLowerCase()] ?? [entry])
    .map((entry) => {
      const [address = '', bits, ...extra] = entry.split('/');
      const family = isIP(address);
      const full = family === 6 ? 128 : 32;
      const prefix = bits === undefined ? full : /^\d{1,3}$/.test(bits) ? Number(bits) : NaN;
      if (family === 0 || extra.length > 0 || !(prefix <= full))
        throw new ConfigError(
          'BATON_TRUSTED_PROXIES',
          `BATON_TRUSTED_PROXIES must be IP addresses or subnets (10.0.0.0/8, fd00::/8) or loopback, linklocal, uniquelocal, separated by commas; got ${shown(entry)}`,
        );
      return { address, prefix, family: family === 6 ? ('ipv6' as const) : ('ipv4' as const) };
    });
}

export interface IdempotencySettings {
  /** BATON_IDEMPOTENCY_TTL_HOURS, in ms: how long a key remembers its first answer (default 24 h). */
  ttlMs: number;
  /** BATON_IDEMPOTENCY_WAIT_MS: how long a request waits for its key's in-flight first answer (default 5 000). */
  waitMs: number;
}

export interface HookRates {
  /** BATON_HOOK_RATE_PER_ADDRESS: webhook deliveries per second per source address (default 50). */
  perAddress: number;
  /** BATON_HOOK_RATE_PER_WEBHOOK: webhook deliveries per second per webhook (default 50). */
  perWebhook: number;
}

/** Bytes held for clients that do not read their answers (src/api/slow-readers.ts). */
export interface UnreadSettings {
  /** BATON_MAX_UNREAD_MIB, in bytes: in all (default 128 MiB). */
  maxUnreadBytes: number;
  /** BATON_MAX_UNREAD_MIB_PER_CONNECTION, in bytes: on one connection (default 32 MiB). */
  maxUnreadBytesPerConnection: number;
}

export interface CanarySettings {
  /** BATON_CANARY_INTERVAL_MS: how often the invariant checker runs; 0: not in this process (default 60 000). */
  intervalMs: number;
  /** BATON_ALERT_WEBHOOK_URL: canary alerts as generic JSON (unset: none). */
  alertWebhookUrl?: string;
  /** BATON_ALERT_SLACK_URL: canary alerts to a Slack-compatible incoming webhook (unset: none). */
  alertSlackUrl?: string;
}

export function readConfig(env: Vars = process.env): Config {
  const secretKey = text(env, 'BATON_SECRET_KEY');
  if (secretKey !== undefined && secretKey.trim() === '') {
    throw new ConfigError(
      'BATON_SECRET_KEY',
      'BATON_SECRET_KEY must be 64 hex characters, base64 of 32 bytes, or a passphrase; got only spaces',
    );
  }
  const rate = (name: string) =>
    number(env, name, DEFAULTS.hookRatePerSecond, {
      min: 0,
      max: 1_000_000_000,
      aboveMin: true,
      accepts: 'deliveries per second, a number above 0',
    });
  return {
    ...readEnv(env),
    ...readConnectionEnv(env),
    logLevel: oneOf(env, 'BATON_LOG_LEVEL', LOG_LEVELS, DEFAULTS.logLevel),
    // Unset stays undefined: only the server can tell whether stdout is a terminal.
    logFormat: text(env, 'BATON_LOG_FORMAT') === undefined ? undefined : oneOf(env, 'BATON_LOG_FORMAT', LOG_FORMATS, 'json'),
    secretKey,
    idempotency: {
      ttlMs:
        number(env, 'BATON_IDEMPOTENCY_TTL_HOURS', DEFAULTS.idempotencyTtlHours, {
          min: 0,
          max: 876_000,
          aboveMin: true,
          accepts: 'a number of hours above 0 (at most 876000)',
        }) * 3_600_000,
      waitMs: number(env, 'BATON_IDEMPOTENCY_WAIT_MS', DEFAULTS.idempotencyWaitMs, {
        min: 0,
        max: 600_000,
        integer: true,
        accepts: 'whole milliseconds from 0 to 600000',
      }),
    },
    hookRates: { perAddress: rate('BATON_HOOK_RATE_PER_ADDRESS'), perWebhook: rate('BATON_HOOK_RATE_PER_WEBHOOK') },
    canary: {
      intervalMs: number(env, 'BATON_CANARY_INTERVAL_MS', DEFAULTS.canaryIntervalMs, {
        min: 0,
        max: MAX_TIMER_MS,
        integer: true,
        accepts: `whole milliseconds from 0 to ${MAX_TIMER_MS} (0: no timer in this process)`,
      }),
      alertWebhookUrl: httpUrl(env, 'BATON_ALERT_WEBHOOK_URL', { secret: true }),
      alertSlackUrl: httpUrl(env, 'BATON_ALERT_SLACK_URL', { secret: true }),
    },
    unread: {
      maxUnreadBytes: mib(env, 'BATON_MAX_UNREAD_MIB', DEFAULTS.maxUnreadMiB),
      maxUnreadBytesPerConnection: mib(env, 'BATON_MAX_UNREAD_MIB_PER_CONNECTION', DEFAULTS.maxUnreadMiBPerConnection),
    },
    chainDepthLimit: number(env, 'BATON_CHAIN_DEPTH_LIMIT', DEFAULTS.chainDepthLimit, {
      min: 1,
      max: 1000,
      integer: true,
      accepts: 'a whole number of links from 1 to 1000',
    }),
    retention: readRetentionEnv(env),
    telemetry: readTelemetryEnv(env),
    network: {
      maxConnectionsPerAddress: number(env, 'BATON_MAX_CONNECTIONS_PER_ADDRESS', DEFAULTS.maxConnectionsPerAddress, {
        min: 1,
        max: 1_000_000,
        integer: true,
        accepts: 'a whole number of connections from 1 to 1000000',
      }),
      trustedProxies: readTrustedProxies(env),
    },
  };
}

/**
 * OpenTelemetry (docs/operations.md, "OpenTelemetry"): Baton reads only what decides whether
 * tracing is on. The OTLP exporter reads the rest of the standard variables itself
 * (OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, …).
 */
export interface TelemetrySettings {
  /** True when an OTLP endpoint is set and OTEL_SDK_DISABLED is not `true`; off, no OpenTelemetry module is loaded. */
  enabled: boolean;
  /** OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is), else OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces): where spans go. */
  endpoint?: string;
  /** BATON_TRACE_PASSES: which background passes become spans (default `errors`). */
  passes: TracePasses;
}

/**
 * `errors`: only a failed background pass is a span, so a trace backend holds the work and the
 * faults; an idle server's passes (the reaper alone runs several a second) would otherwise
 * outnumber them. `all`: every pass, to see what the loops cost.
 */
export const TRACE_PASSES = ['errors', 'all'] as const;
export type TracePasses = (typeof TRACE_PASSES)[number];

export function readTelemetryEnv(env: Vars = process.env): TelemetrySettings {
  // Credentials may sit in the URL's user part: a bad one is not echoed.
  const traces = httpUrl(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', { secret: true });
  const base = httpUrl(env, 'OTEL_EXPORTER_OTLP_ENDPOINT', { secret: true });
  const disabled = oneOf(env, 'OTEL_SDK_DISABLED', ['true', 'false'], 'false') === 'true';
  const endpoint = traces ?? (base && `${base.replace(/\/+$/, '')}/v1/traces`);
  const passes = oneOf(env, 'BATON_TRACE_PASSES', TRACE_PASSES, DEFAULTS.tracePasses);
  return disabled || !endpoint ? { enabled: false, passes } : { enabled: true, endpoint, passes };
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
  /**
   * BATON_PRUNE_INTERVAL_MS: how long after start, and after each finished sweep, the next sweep
   * begins (default 600 000, ten minutes: rows wait at most that long past their window; shorter
   * only spends more idle reads). Batches within a sweep are paced by their own cost, not by this.
   */
  pruneIntervalMs?: number;
}

export const RETENTION_DEFAULTS = Object.freeze({ retentionDays: 30, auditRetentionDays: 365, pruneIntervalMs: 600_000 });

/** Days are a non-negative number (fractions allowed: 0.5 is twelve hours), at most 100 years. */
const days = (env: Vars, name: string, fallback: number) =>
  number(env, name, fallback, { min: 0, max: 36_500, accepts: 'a number of days from 0 to 36500 (0 keeps everything)' });

/**
 * The archive directory may be missing (the pruner makes it, 0700) but not something else: a
 * file there would fail every sweep, so it stops `baton up` at start instead.
 */
export function refuseNonDirectory(dir: string): string {
  if (existsSync(dir) && !statSync(dir).isDirectory())
    throw new ConfigError('BATON_ARCHIVE_DIR', `BATON_ARCHIVE_DIR must be a directory; ${dir} is not one`);
  return dir;
}

export function readRetentionEnv(env: Vars = process.env): RetentionEnv {
  const dir = env.BATON_ARCHIVE_DIR;
  if (dir !== undefined && dir.trim() === '' && dir !== '')
    throw new ConfigError('BATON_ARCHIVE_DIR', 'BATON_ARCHIVE_DIR must be a directory path; got only spaces');
  return {
    retentionDays: days(env, 'BATON_RETENTION_DAYS', RETENTION_DEFAULTS.retentionDays),
    auditRetentionDays: days(env, 'BATON_AUDIT_RETENTION_DAYS', RETENTION_DEFAULTS.auditRetentionDays),
    archiveDir: dir ? refuseNonDirectory(resolve(dir)) : undefined,
    pruneIntervalMs: number(env, 'BATON_PRUNE_INTERVAL_MS', RETENTION_DEFAULTS.pruneIntervalMs, {
      min: 1_000,
      max: MAX_TIMER_MS,
      integer: true,
      accepts: `whole milliseconds from 1000 to ${MAX_TIMER_MS}`,
    }),
  };
}
