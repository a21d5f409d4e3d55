import pino, { type Logger } from 'pino';
import type { FastifyInstance } from 'fastify';
import { buildServer } from '../api/server.ts';
import { KeyStore } from '../auth/keys.ts';
import { DEFAULTS, defaultNodeId, readEnv, type Env } from '../config.ts';
import { Engine } from '../engine/engine.ts';
import { startLoop, type LoopHandle } from '../engine/loop.ts';
import type { StoreAdapter } from '../store/adapter.ts';
import { openStore } from '../store/open.ts';

export interface BatonNode {
  engine: Engine;
  keys: KeyStore;
  app: FastifyInstance;
  store: StoreAdapter;
  url: string;
  /** The admin key, when this start created it (printed once). */
  createdAdminKey: string | null;
  stop(): Promise<void>;
}

export interface StartOptions {
  env?: Partial<Env> & { pgSchema?: string };
  logger?: Logger | false;
  /** Run the reaper timer (default true). */
  reaper?: boolean;
  reaperIntervalMs?: number;
  nodeId?: string;
}

/** `baton up`: open the store, migrate, ensure an admin key, serve HTTP, run background loops. */
export async function startNode(opts: StartOptions = {}): Promise<BatonNode> {
  const env = { ...readEnv(), ...opts.env };
  const logger = opts.logger === undefined ? pino({ level: process.env.BATON_LOG_LEVEL ?? 'info', redact: ['req.headers.authorization', '*.key', '*.secret'] }) : opts.logger;
  const store = openStore({ databaseUrl: env.databaseUrl, dataDir: env.dataDir, schema: opts.env?.pgSchema ?? process.env.BATON_PG_SCHEMA });
  let ready = false;
  const applied = await store.migrate();
  if (logger && applied.length) logger.info({ applied }, 'migrations applied');
  const nodeId = opts.nodeId ?? defaultNodeId();
  const engine = new Engine({ store, nodeId });
  const keys = new KeyStore(store);
  const createdAdminKey = await keys.ensureBootstrapKey(env.dataDir);
  const app = await buildServer({ engine, keys, logger, isReady: () => ready });

  engine.events.on('loop:error', ({ loop, error }) => logger && logger.error({ err: error, loop }, `${loop} failed; retrying on the next interval`));
  engine.events.on('reaper:reaped', (rows) => logger && logger.info({ reaped: rows.map((r) => ({ id: r.id, kind: r.kind })) }, 'reaper acted'));

  const loops: LoopHandle[] = [];
  if (opts.reaper !== false) loops.push(startLoop('reaper', () => engine.reapOnce(), opts.reaperIntervalMs ?? DEFAULTS.reaperIntervalMs, engine.events));

  const address = await app.listen({ port: env.port, host: env.host });
  ready = true;
  if (logger) logger.info({ url: address, store: store.kind, node: nodeId }, 'baton is up');

  let stopping: Promise<void> | undefined;
  return {
    engine,
    keys,
    app,
    store,
    url: address,
    createdAdminKey,
    stop() {
      stopping ??= (async () => {
        ready = false;
        await Promise.all(loops.map((l) => l.stop()));
        engine.close(); // releases waiting long-polls (they answer 204)
        await app.close();
        await store.close();
      })();
      return stopping;
    },
  };
}
