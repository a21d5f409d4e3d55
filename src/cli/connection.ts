import { readKeyFile } from '../auth/keys.ts';
import { BatonClient, type ClientOptions } from '../client.ts';
import { readEnv } from '../config.ts';

export interface ConnectionFlags {
  server?: string;
  key?: string;
  dataDir?: string;
}

/** Server and key from flags, then the environment, then the data directory of a local `baton up`. */
export function resolveConnection(g: ConnectionFlags): { server: string; key: string | undefined } {
  const env = readEnv();
  const dataDir = g.dataDir ?? env.dataDir;
  const server = g.server ?? process.env.BATON_URL ?? `http://${env.host}:${env.port}`;
  const key = g.key ?? process.env.BATON_API_KEY ?? readKeyFile(dataDir);
  return { server, key };
}

export function connect(g: ConnectionFlags, via: ClientOptions['via'] = 'cli'): BatonClient {
  return new BatonClient({ ...resolveConnection(g), via });
}
