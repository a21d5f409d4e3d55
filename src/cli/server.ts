/** `baton up` (start a server) and `baton migrate` (apply pending migrations and exit). */
import type { Command } from 'commander';
import { readEnv } from '../config.ts';
import { int } from './args.ts';
import { opts, print } from './globals.ts';

export function registerServerCommands(program: Command): void {
  program
    .command('up')
    .description('start a Baton server (SQLite in the data dir, or BATON_DATABASE_URL=postgres://…)')
    .option('--port <port>', 'HTTP port (env BATON_PORT; default 7070)', int('port'))
    .option('--host <host>', 'listen address (env BATON_HOST; default 127.0.0.1)')
    .action(async (_o, cmd) => {
      const o = opts(cmd);
      const { startNode } = await import('../server/up.ts');
      const node = await startNode({
        env: { ...(o.port ? { port: o.port } : {}), ...(o.host ? { host: o.host } : {}), ...(o.dataDir ? { dataDir: o.dataDir } : {}) },
      });
      // Handlers before anything is printed: whoever sees the key or the banner may stop us at once.
      const stopped = new Promise<void>((resolve) => {
        let signals = 0;
        const onSignal = () => {
          if (++signals > 1) process.exit(130);
          node.stop().then(resolve, resolve);
        };
        process.on('SIGINT', onSignal);
        process.on('SIGTERM', onSignal);
      });
      if (node.createdAdminKey) {
        process.stderr.write(
          `\nAdmin API key (shown once; also saved to ${o.dataDir ?? readEnv().dataDir}/admin.key, mode 0600):\n  ${node.createdAdminKey}\n` +
            (node.replacedKeyFile
              ? `The admin.key there held another key (another store's, started in the same directory): kept as ${node.replacedKeyFile}.\n` +
                'Give each store its own BATON_DATA_DIR to keep their keys apart.\n'
              : '') +
            '\n',
        );
      }
      // For a person at a terminal; in JSON the 'baton is up' line already carries the same facts.
      if (node.logFormat === 'pretty') {
        const { upBanner } = await import('../server/banner.ts');
        process.stdout.write(
          upBanner({ url: node.url, store: node.storeLabel, dataDir: node.dataDir, adminKeyCreated: node.createdAdminKey !== null }),
        );
      }
      await stopped;
    });

  program
    .command('migrate')
    .description('apply pending database migrations and exit')
    .action(async (_o, cmd) => {
      const o = opts(cmd);
      const env = readEnv();
      // Loaded only here: database drivers cost most of a CLI start-up.
      const { openStore } = await import('../store/open.ts');
      const store = openStore({ databaseUrl: env.databaseUrl, dataDir: o.dataDir ?? env.dataDir, schema: env.pgSchema });
      try {
        const applied = await store.migrate();
        const status = await store.migrationStatus();
        print(o, { applied, current: status.applied }, () =>
          applied.length ? `applied migrations ${applied.join(', ')}` : `up to date (version ${Math.max(0, ...status.applied)})`,
        );
      } finally {
        await store.close();
      }
    });
}
