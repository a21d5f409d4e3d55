import { readKeyFile } from '../auth/keys.ts';
import { BatonClient, type ClientOptions } from '../client.ts';
import { readConnectionEnv, readEnv } from '../config.ts';
import { nodeHttpTransport } from '../worker/http.ts';

export interface ConnectionFlags {
  server?: string;
  key?: string;
  dataDir?: string;
}

/** Server and key from flags, then the environment, then the data directory of a local `baton up`. */
export function resolveConnection(g: ConnectionFlags): { server: string; key: string | undefined } {
  const env = readEnv();
  const { serverUrl, apiKey } = readConnectionEnv();
  const dataDir = g.dataDir ?? env.dataDir;
  const server = g.server ?? serverUrl ?? `http://${env.host}:${env.port}`;
  const key = g.key ?? apiKey ?? readKeyFile(dataDir);
  return { server, key };
}

export function connect(g: ConnectionFlags, via: ClientOptions['via'] = 'cli'): BatonClient {
  return new BatonClient({ ...resolveConnection(g), via, transport: nodeHttpTransport });
}
