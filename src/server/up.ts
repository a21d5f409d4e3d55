import type { Logger } from 'pino';
import type { FastifyInstance } from 'fastify';
import { buildServer, type ConnectionLimits } from '../api/server.ts';
import { alertSinks } from '../canary/alerts.ts';
import { ALERT_LOOP_MS, Canary } from '../canary/service.ts';
import { KeyStore } from '../auth/keys.ts';
import { DEFAULTS, defaultNodeId, readConfig, type Env, type LogFormat, type RetentionEnv, type TrustedProxy } from '../config.ts';
import { Dispatcher, DISPATCH_POLL_MS, type DispatcherOptions } from '../delivery/dispatcher.ts';
import { lazySecretBox } from '../delivery/secrets.ts';
import { Engine } from '../engine/engine.ts';
import { startLoop, type LoopSpec } from '../engine/loop.ts';
import { PURGE_INTERVAL_MS, purgeIdempotencyOnce } from '../engine/triggers/idempotency.ts';
import { SCHEDULER_INTERVAL_MS, schedulerPass } from '../engine/triggers/scheduler.ts';
import type { StoreAdapter } from '../store/adapter.ts';
import { openStore } from '../store/open.ts';
import { isStoreUnavailable } from '../store/unavailable.ts';
import { PRUNE_INTERVAL_MS, Pruner } from '../retention/pruner.ts';
import type { SweepReport } from '../retention/prune.ts';
import { describeStore } from './banner.ts';
import { createLogger, resolveLogFormat } from './logger.ts';

/** A database outage is logged once per loop per this long (with the count of failures in between). */
const OUTAGE_LOG_EVERY_MS = 30_000;
/** A clock this far from the store's is worth a line at start (it changes nothing Baton stores or decides). */
const CLOCK_SKEW_NOTE_MS = 1_000;

export interface BatonNode {
  engine: Engine;
  keys: KeyStore;
  app: FastifyInstance;
  store: StoreAdapter;
  url: string;
  /** The admin key, when this start created it (printed once). */
  createdAdminKey: string | null;
  /** Where the admin.key file this start replaced was kept (it held another store's key). */
  replacedKeyFile: string | null;
  dataDir: string;
  /** The store for a person (src/server/banner.ts): credentials redacted. */
  storeLabel: string;
  /** The format of the logger this start made; null when the caller passed its own (or none). */
  logFormat: LogFormat | null;
  /** Export the spans ended so far now (tests); nothing to do when tracing is off. */
  flushTraces(): Promise<void>;
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Overrides of the environment's BATON_DATA_DIR, BATON_DATABASE_URL, BATON_PG_SCHEMA, BATON_PORT, BATON_HOST. */
  env?: Partial<Env>;
  logger?: Logger | false;
  /** Run the reaper timer (default true). */
  reaper?: boolean;
  reaperIntervalMs?: number;
  /** Canary timer interval; 0 turns it off here (default: BATON_CANARY_INTERVAL_MS or 60 s). */
  canaryIntervalMs?: number;
  /** Push delivery to agents with `delivery: push` (default on; false turns it off). */
  dispatcher?: false | DispatcherOptions;
  /** Fire due schedules (default true); the interval defaults to SCHEDULER_INTERVAL_MS. */
  scheduler?: boolean;
  schedulerIntervalMs?: number;
  nodeId?: string;
  /** HTTP connection limits (defaults: CONNECTION_LIMITS in src/api/server.ts; BATON_MAX_CONNECTIONS_PER_ADDRESS). */
  limits?: Partial<ConnectionLimits>;
  /** Proxies whose X-Forwarded-For names the client (default: BATON_TRUSTED_PROXIES). */
  trustedProxies?: readonly TrustedProxy[];
  /** Run the retention pruner (default true; it does nothing when both windows are 0). */
  pruner?: boolean;
  /** Between sweeps (default: BATON_PRUNE_INTERVAL_MS, 10 min). */
  pruneIntervalMs?: number;
  /** Forget expired idempotency keys (default true); the interval defaults to PURGE_INTERVAL_MS (1 min). */
  purge?: boolean;
  purgeIntervalMs?: number;
  /** Retention settings (default: BATON_RETENTION_DAYS, BATON_AUDIT_RETENTION_DAYS, BATON_ARCHIVE_DIR). */
  retention?: RetentionEnv;
}

/** `baton up`: open the store, migrate, ensure an admin key, serve HTTP, run background loops. */
export async function startNode(opts: StartOptions = {}): Promise<BatonNode> {
  // Every BATON_* variable at once: a bad one stops the start here, before the store opens, naming the variable.
  const config = readConfig();
  const env = { ...config, ...opts.env };
  const retention = opts.retention ?? config.retention;
  const logFormat = opts.logger === undefined ? resolveLogFormat(config.logFormat) : null;
  const logger = logFormat ? createLogger({ level: config.logLevel, format: logFormat }) : (opts.logger ?? false);
  const location = { databaseUrl: env.databaseUrl, dataDir: env.dataDir, schema: opts.env?.pgSchema ?? config.pgSchema };
  const store = openStore({ ...location, serve: true });
  let ready = false;
  const applied = await store.migrate();
  if (logger && applied.length) logger.info({ applied }, 'migrations applied');
  logClockSkew(store, logger);
  const nodeId = opts.nodeId ?? defaultNodeId();
  const engine = new Engine({
    store,
    nodeId,
    secrets: lazySecretBox(env.dataDir, config.secretKey),
    // Breaker changes are alerted through the canary's sinks (kinds only; the canary holds the URLs and delivers).
    alertSinks: alertSinks(config.canary).map((s) => s.kind),
    chainDepthLimit: config.chainDepthLimit,
  });
  const keys = new KeyStore(store);
  const bootstrap = await keys.ensureBootstrapKey(env.dataDir);
  const createdAdminKey = bootstrap?.key ?? null;
  const reaperIntervalMs = opts.reaperIntervalMs ?? DEFAULTS.reaperIntervalMs;
  const canary = new Canary({
    store,
    nodeId,
    intervalMs: opts.canaryIntervalMs ?? config.canary.intervalMs,
    sinks: alertSinks(config.canary),
    timing: {
      reaperIntervalMs,
      backlogExpiryMs: engine.backlogExpiryMs,
      schedulerIntervalMs: opts.schedulerIntervalMs ?? SCHEDULER_INTERVAL_MS,
      dispatchPollMs: DISPATCH_POLL_MS,
    },
  });
  const app = await buildServer({
    engine,
    keys,
    logger,
    isReady: () => ready,
    canary,
    limits: { maxConnectionsPerAddress: config.network.maxConnectionsPerAddress, ...config.unread, ...opts.limits },
    trustedProxies: opts.trustedProxies ?? config.network.trustedProxies,
    retention,
    idempotency: config.idempotency,
    hookRates: config.hookRates,
  });

  const tracing = await startTracingIfOn(config.telemetry, engine, app, nodeId, logger);

  logLoops(engine, logger);

  // The dispatcher also wakes on store signals (work queued for a push agent, a seat freed).
  const dispatcher = opts.dispatcher === false ? undefined : new Dispatcher(engine, opts.dispatcher || {});
  const pruner =
    opts.pruner === false
      ? undefined
      : new Pruner({
          store,
          settings: retention,
          nodeId,
          onSweep: (r) => logSweep(logger, retention, r),
        });

  const passes = backgroundPasses({ opts, engine, dispatcher, canary, pruner, reaperIntervalMs, retention });

  let address: string;
  try {
    address = await app.listen({ port: env.port, host: env.host });
  } catch (err) {
    // Nothing was started yet but the store and the server object: close them, or the store's
    // pool would keep the process alive after the error was printed.
    engine.close();
    await app.close().catch(() => {});
    await tracing?.shutdown().catch(() => {});
    await store.close();
    const why = (err as NodeJS.ErrnoException).code === 'EADDRINUSE' ? 'the address is in use' : (err as Error).message;
    throw new Error(`cannot listen on ${env.host}:${env.port} (BATON_HOST, BATON_PORT): ${why}`, { cause: err });
  }
  ready = true;
  const loops = passes.filter((p) => p.on).map((p) => startLoop(p, engine.events));
  if (logger) logger.info({ url: address, store: store.describe().kind, node: nodeId, data_dir: env.dataDir }, 'baton is up');

  let stopping: Promise<void> | undefined;
  return {
    engine,
    keys,
    app,
    store,
    url: address,
    createdAdminKey,
    replacedKeyFile: bootstrap?.replacedKeyFile ?? null,
    dataDir: env.dataDir,
    storeLabel: describeStore(location),
    logFormat,
    flushTraces: async () => tracing?.flush(),
    stop() {
      stopping ??= (async () => {
        ready = false;
        await Promise.all(loops.map((l) => l.stop())); // leader loops hand their leases on
        await dispatcher?.stop(); // in-flight pushes get a grace period, then are released
        engine.close(); // releases waiting long-polls (they answer 204)
        // A keep-alive connection that was mid-request when closing began is not "idle" to Node and
        // would hold app.close() until keepAliveTimeout (75 s). Long-polls were released above and
        // ordinary requests take milliseconds, so after 2 s whatever is left is cut.
        const cut = setTimeout(() => app.server.closeAllConnections(), 2_000);
        await app.close();
        clearTimeout(cut);
        await tracing?.shutdown(); // before the store closes: the last terminal spans read their row
        await store.close();
        if (logger) logger.info({ node: nodeId }, 'baton stopped');
      })();
      return stopping;
    },
  };
}

/**
 * Say at start how far this process's wall clock is from the store's (the database's on
 * PostgreSQL) when it is more than CLOCK_SKEW_NOTE_MS: every stored time is on the store's clock,
 * so nothing goes wrong, but the process's own log lines and a worker's view of deadlines differ.
 */
function logClockSkew(store: StoreAdapter, logger: Logger | false): void {
  const { offsetMs, errorMs } = store.clockSkew();
  if (!logger || Math.abs(offsetMs) < CLOCK_SKEW_NOTE_MS) return;
  logger.warn(
    { clock_offset_ms: Math.round(offsetMs), error_ms: Math.round(errorMs) },
    `this machine's clock is ${(Math.abs(offsetMs) / 1000).toFixed(1)} s ${offsetMs > 0 ? 'behind' : 'ahead of'} the database's; Baton keeps time by the database's`,
  );
}

/** Log failed passes (a database outage once per loop per OUTAGE_LOG_EVERY_MS), a full disk (as often) and what the reaper did. */
function logLoops(engine: Engine, logger: Logger | false): void {
  // A database away (a restart, a network cut) fails every pass of every loop until it is back:
  // said once per loop per 30 s as what it is, with how many more failed meanwhile, not as a
  // stack per pass. Any other failure is logged whole, every time.
  const quietUntil = new Map<string, { until: number; more: number }>();
  engine.events.on('loop:error', ({ loop, error }) => {
    if (!logger) return;
    if (!isStoreUnavailable(error)) return logger.error({ err: error, loop }, `${loop} failed; retrying on the next interval`);
    const now = Date.now();
    const quiet = quietUntil.get(loop);
    if (quiet && quiet.until > now) {
      quiet.more++;
      return;
    }
    quietUntil.set(loop, { until: now + OUTAGE_LOG_EVERY_MS, more: 0 });
    logger.warn(
      { loop, code: (error as { code?: unknown })?.code, message: (error as Error)?.message, failed_since_last: quiet?.more ?? 0 },
      `${loop}: the database is unavailable; retrying on the next interval`,
    );
  });
  // A full disk fails writes from every request and loop until space is freed: said once per
  // OUTAGE_LOG_EVERY_MS with how many failed meanwhile, and once when writes succeed again.
  let fullQuietUntil = 0;
  let fullMore = 0;
  engine.events.on('store:full', ({ code, message, first }) => {
    if (!logger) return;
    const now = Date.now();
    if (!first && now < fullQuietUntil) {
      fullMore++;
      return;
    }
    logger.error(
      { code, message, failed_since_last: fullMore },
      "store_full: the database's disk is full; writes fail (503) and /readyz answers 503 until space is freed",
    );
    fullQuietUntil = now + OUTAGE_LOG_EVERY_MS;
    fullMore = 0;
  });
  engine.events.on('store:space', ({ fullForMs }) => {
    if (logger) logger.warn({ full_for_ms: fullForMs }, 'store_full cleared: a write succeeded; the database has space again');
  });
  engine.events.on(
    'reaper:reaped',
    (rows) => logger && logger.info({ reaped: rows.map((r) => ({ id: r.id, kind: r.kind })) }, 'reaper acted'),
  );
}

/** Log a prune sweep that removed or kept anything. */
function logSweep(logger: Logger | false, retention: RetentionEnv, r: SweepReport): void {
  if (!logger) return;
  const removed = {
    executions: r.executions,
    events: r.events,
    logs: r.logs,
    keys: r.keys,
    audit: r.audit,
    violations: r.violations,
    alerts: r.alerts,
  };
  if (Object.values(removed).some((n) => n > 0) || r.kept > 0)
    logger.info(
      {
        removed,
        kept: r.kept,
        batches: r.batches,
        duration_ms: Math.round(r.duration_ms),
        max_batch_ms: Math.round(r.max_tx_ms),
        batches_ms: Math.round(r.tx_ms ?? 0),
        ...(r.checkpoints
          ? {
              checkpoints: r.checkpoints,
              max_checkpoint_ms: Math.round(r.max_checkpoint_ms ?? 0),
              checkpoints_ms: Math.round(r.checkpoint_ms ?? 0),
            }
          : {}),
        archive: retention.archiveDir ?? null,
      },
      'pruner removed history past its window',
    );
}

/**
 * Every background pass this process runs, on the one loop helper (src/engine/loop.ts): a
 * plain `…Once()` each, its interval (±20 % jitter), and `leader` when only the process
 * holding that lease runs it (otherwise every process does; those passes are safe to run in
 * several processes at once). A failed pass is logged (above) and counted
 * (baton_loop_errors_total), and runs again on its next interval.
 */
function backgroundPasses(p: {
  opts: StartOptions;
  engine: Engine;
  dispatcher: Dispatcher | undefined;
  canary: Canary;
  pruner: Pruner | undefined;
  reaperIntervalMs: number;
  retention: RetentionEnv;
}): Array<LoopSpec & { on: boolean }> {
  const { opts, engine, dispatcher, canary, pruner, reaperIntervalMs, retention } = p;
  return [
    { name: 'reaper', on: opts.reaper !== false, intervalMs: reaperIntervalMs, once: () => engine.reapOnce() },
    {
      name: 'scheduler',
      on: opts.scheduler !== false,
      intervalMs: opts.schedulerIntervalMs ?? SCHEDULER_INTERVAL_MS,
      once: (stopping) => schedulerPass(engine, stopping),
    },
    { name: 'dispatcher', on: dispatcher !== undefined, intervalMs: DISPATCH_POLL_MS, once: () => dispatcher!.dispatchOnce() },
    {
      name: 'idempotency-purge',
      on: opts.purge !== false,
      intervalMs: opts.purgeIntervalMs ?? PURGE_INTERVAL_MS,
      once: () => purgeIdempotencyOnce(engine),
    },
    // Leader-only under its row in canary_state; the first cycle runs at start.
    {
      name: 'canary',
      on: canary.enabled,
      intervalMs: canary.intervalMs,
      leader: canary.lease,
      immediate: true,
      once: (stopping) => canary.cycleOnce(stopping),
    },
    {
      name: 'canary-alerts',
      on: canary.enabled,
      intervalMs: Math.min(ALERT_LOOP_MS, canary.intervalMs),
      once: () => canary.deliverAlerts(),
    },
    // Leader-only on PostgreSQL (the `pruner` leader lease); SQLite has one process and no lease.
    {
      name: 'pruner',
      on: pruner?.enabled === true,
      intervalMs: opts.pruneIntervalMs ?? retention.pruneIntervalMs ?? PRUNE_INTERVAL_MS,
      leader: pruner?.lease,
      once: () => pruner!.batchOnce(),
    },
  ];
}

async function startTracingIfOn(
  telemetry: ReturnType<typeof readConfig>['telemetry'],
  engine: Engine,
  app: FastifyInstance,
  nodeId: string,
  logger: Logger | false,
) {
  // OpenTelemetry only when an OTLP endpoint is configured: imported here, lazily, so with tracing
  // off not one OpenTelemetry module is loaded (src/telemetry/tracing.ts subscribes to the engine's events).
  const tracing = telemetry.enabled
    ? (await import('../telemetry/tracing.ts')).startTracing({ engine, app, nodeId, logger, passes: telemetry.passes })
    : undefined;
  if (logger && tracing) {
    const to = new URL(telemetry.endpoint!); // origin and path only: credentials may sit in the URL
    logger.info({ endpoint: `${to.origin}${to.pathname}` }, 'tracing on: spans go to the OTLP endpoint');
  }
  return tracing;
}
