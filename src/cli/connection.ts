import { readKeyFile } from '../auth/keys.ts';
import { BatonClient, type ClientOptions } from '../client.ts';
import { readConnectionEnv, readEnv } from '../config.ts';
import { nodeHttpTransport } from '../worker/http.ts';

export interface ConnectionFlags {
  server?: string;
  key?: string;
  dataDir?: string;
}

/** Where the last resolved connection looked for a key and found none (for the error's hint). */
let keyNotFoundIn: string | undefined;

/** Server and key from flags, then the environment, then the data directory of a local `baton up`. */
export function resolveConnection(g: ConnectionFlags): { server: string; key: string | undefined } {
  const env = readEnv();
  const { serverUrl, apiKey } = readConnectionEnv();
  const dataDir = g.dataDir ?? env.dataDir;
  const server = g.server ?? serverUrl ?? `http://${env.host}:${env.port}`;
  const key = g.key ?? apiKey ?? readKeyFile(dataDir);
  keyNotFoundIn = key === undefined ? dataDir : undefined;
  return { server, key };
}

/** For an `unauthorized` answer to a request sent without a key: where the CLI looked. */
export function missingKeyHint(): string | undefined {
  return keyNotFoundIn === undefined
    ? undefined
    : `no API key was given: pass --key, set BATON_API_KEY, or run where the server's data directory holds admin.key (none in ${keyNotFoundIn}; BATON_DATA_DIR or --data-dir names another)`;
}

export function connect(g: ConnectionFlags, via: ClientOptions['via'] = 'cli'): BatonClient {
  return new BatonClient({ ...resolveConnection(g), via, transport: nodeHttpTransport });
}
