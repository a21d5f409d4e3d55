/**
 * The few lines `baton up` prints when it is listening in a terminal: where to point a browser or
 * a worker, which store it opened, and where the admin key is. Never a secret: the store URL goes
 * through redactUrl, and the admin key itself is printed (once) by the CLI, not here.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ADMIN_KEY_FILE } from '../auth/keys.ts';
import { redactUrl } from '../domain/urls.ts';
import { sqliteFile, type OpenStoreOptions } from '../store/open.ts';
import { parseHosts } from '../store/postgres-hosts.ts';
import { VERSION } from '../version.ts';

/** The store, for a person: the SQLite file, or PostgreSQL's URL without credentials and the schema. */
export function describeStore(location: Pick<OpenStoreOptions, 'databaseUrl' | 'dataDir' | 'schema'>): string {
  const file = sqliteFile(location);
  if (file !== undefined) return `SQLite ${file}`;
  // Several hosts: the first one's URL (a URL parser reads one host only), then the others.
  const { hosts, url } = parseHosts(location.databaseUrl!);
  const others =
    hosts.length > 1
      ? ` (or ${hosts
          .slice(1)
          .map((h) => `${h.host}:${h.port}`)
          .join(', ')}: whichever takes writes)`
      : '';
  return `PostgreSQL ${redactUrl(hosts.length > 1 ? url : location.databaseUrl!)}${others}, schema ${location.schema ?? "the connection's search_path"}`;
}

export interface BannerFacts {
  url: string;
  /** From describeStore. */
  store: string;
  dataDir: string;
  /** This start created the admin key (the CLI has just printed it). */
  adminKeyCreated: boolean;
}

export function upBanner(f: BannerFacts): string {
  const keyFile = join(f.dataDir, ADMIN_KEY_FILE);
  const adminKey = f.adminKeyCreated
    ? `printed above, once (also in ${keyFile})`
    : existsSync(keyFile)
      ? keyFile
      : `not in ${keyFile}: an earlier start, with another data dir, created it`;
  const rows: Array<[string, string]> = [
    ['URL', f.url],
    ['Dashboard', `${f.url}/ (sign in with an admin key)`],
    ['Store', f.store],
    ['Data dir', f.dataDir],
    ['Admin key', adminKey],
    ['Docs', 'docs/operations.md (running it), docs/cli.md (commands); `baton --help`'],
  ];
  return ['', `Baton ${VERSION} is up`, ...rows.map(([k, v]) => `  ${(k + ':').padEnd(11)} ${v}`), ''].join('\n') + '\n';
}
