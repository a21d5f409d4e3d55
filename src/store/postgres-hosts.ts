/**
 * Several PostgreSQL hosts in one URL, as libpq reads them (postgres://u@h1:p1,h2:p2/db), with
 * libpq's target_session_attrs=read-write: each new connection goes to the host that accepts
 * writes, found by asking every host in turn. `pg` connects to one host only, so the pool's and
 * the LISTEN connection's clients choose their host here before connecting. After a promotion
 * elsewhere the cached choice is dropped on the first sign of it (a connection error, a refused
 * connection, a read-only error) and the next connection asks the hosts again.
 */
import pg from 'pg';

export interface PgHost {
  host: string;
  port: number;
}

export interface HostList {
  hosts: PgHost[];
  /** The URL of one host (the first), without target_session_attrs: every other setting of the URL. */
  url: string;
  /** Whether each connection must be checked for writes: several hosts, or target_session_attrs asked for it. */
  readWrite: boolean;
}

const DEFAULT_PORT = 5432;
/** target_session_attrs values that mean a host accepting writes; Baton writes, so nothing else will do. */
const WRITABLE_ATTRS = new Set(['read-write', 'primary']);

/**
 * Read the hosts of a postgres:// URL. Throws (naming target_session_attrs) for a value other than
 * read-write or primary: Baton writes on every connection, so a standby can never serve it.
 */
export function parseHosts(url: string): HostList {
  const m = /^(postgres(?:ql)?:\/\/)([^@/?#]*@)?([^/?#]*)(.*)$/.exec(url);
  if (!m) return { hosts: [], url, readWrite: false };
  const [, scheme, auth = '', hostPart, rest = ''] = m;
  const hosts: PgHost[] = [];
  for (const item of hostPart!.split(',')) {
    if (item === '') continue;
    const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(item);
    if (v6) {
      hosts.push({ host: v6[1]!, port: v6[2] ? Number(v6[2]) : DEFAULT_PORT });
      continue;
    }
    const colon = item.lastIndexOf(':');
    hosts.push(
      colon >= 0
        ? { host: decodeURIComponent(item.slice(0, colon)), port: Number(item.slice(colon + 1)) || DEFAULT_PORT }
        : { host: decodeURIComponent(item), port: DEFAULT_PORT },
    );
  }
  const [path, query = ''] = splitOnce(rest, '?');
  const params = new URLSearchParams(query);
  const attrs = params.get('target_session_attrs');
  if (attrs !== null && !WRITABLE_ATTRS.has(attrs))
    throw new Error(
      `BATON_DATABASE_URL: target_session_attrs must be read-write (or primary); Baton writes on every connection (got '${attrs}')`,
    );
  params.delete('target_session_attrs');
  const first = hosts[0];
  const hostText = first ? `${first.host.includes(':') ? `[${first.host}]` : encodeURIComponent(first.host)}:${first.port}` : hostPart;
  const q = params.toString();
  return { hosts, url: `${scheme}${auth}${hostText}${path}${q ? `?${q}` : ''}`, readWrite: hosts.length > 1 || attrs !== null };
}

function splitOnce(s: string, sep: string): [string, string | undefined] {
  const i = s.indexOf(sep);
  return i < 0 ? [s, undefined] : [s.slice(0, i), s.slice(i + 1)];
}

/** SQLSTATEs that say this host no longer serves writes (or is going away): choose again. */
const RESOLVE_AGAIN = new Set(['25006', '57P01', '57P02', '57P03']);

/** Whether an error from a connection or a statement means the writable host may have moved. */
export function movedHostError(err: unknown): boolean {
  const code = (err as { code?: unknown } | undefined)?.code;
  // No SQLSTATE: a network error (ECONNRESET…), or the connection ended.
  if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return true;
  return RESOLVE_AGAIN.has(code) || code.startsWith('08');
}

/** How long asking one host may take before the next is tried. */
const PROBE_TIMEOUT_MS = 5_000;

/**
 * The host that accepts writes, remembered until `forget`. Asking is shared: connections opened
 * together wait on one round of asking.
 */
export class PrimaryResolver {
  private chosen: PgHost | undefined;
  private asking: Promise<PgHost> | undefined;

  constructor(
    private readonly list: HostList,
    private readonly config: pg.ClientConfig,
  ) {}

  get hosts(): readonly PgHost[] {
    return this.list.hosts;
  }

  primary(): Promise<PgHost> {
    if (this.chosen) return Promise.resolve(this.chosen);
    this.asking ??= this.ask().finally(() => (this.asking = undefined));
    return this.asking;
  }

  /** Drop the choice if it is still `host` (another connection may have chosen again already). */
  forget(host?: PgHost): void {
    if (!host || (this.chosen && sameHost(this.chosen, host))) this.chosen = undefined;
  }

  private async ask(): Promise<PgHost> {
    const seen: string[] = [];
    for (const h of this.list.hosts) {
      const client = aim(new pg.Client({ ...this.config, connectionTimeoutMillis: PROBE_TIMEOUT_MS }), h);
      client.on('error', () => {});
      try {
        await client.connect();
        const { rows } = await client.query<{ transaction_read_only: string }>('SHOW transaction_read_only');
        if (rows[0]?.transaction_read_only === 'off') {
          this.chosen = h;
          return h;
        }
        seen.push(`${h.host}:${h.port} read-only`);
      } catch (err) {
        seen.push(`${h.host}:${h.port} ${(err as Error).message || (err as { code?: string }).code}`);
      } finally {
        await client.end().catch(() => {});
      }
    }
    throw Object.assign(new Error(`no PostgreSQL host accepts writes (${seen.join('; ')})`), { code: 'ECONNREFUSED' });
  }
}

const sameHost = (a: PgHost, b: PgHost) => a.host === b.host && a.port === b.port;

/** Point a client not yet connected at `h`: pg takes host and port from the connection string over its config's own. */
function aim<C extends pg.Client>(client: C, h: PgHost): C {
  const c = client as unknown as { host: string; port: number; connectionParameters: { host: string; port: number } };
  c.host = c.connectionParameters.host = h.host;
  c.port = c.connectionParameters.port = h.port;
  return client;
}

/**
 * A pg.Client class whose instances connect to the resolver's writable host, check that it still
 * takes writes, and tell the resolver when it stops (an error on the connection or a statement).
 */
export function primaryClientClass(resolver: PrimaryResolver): typeof pg.Client {
  return class PrimaryClient extends pg.Client {
    private target: PgHost | undefined;

    override connect(): Promise<pg.Client>;
    override connect(callback: (err: Error | null, c?: pg.Client) => void): void;
    override connect(callback?: (err: Error | null, c?: pg.Client) => void): Promise<pg.Client> | void {
      const done = this.connectToPrimary().then(() => this as pg.Client);
      if (!callback) return done;
      done.then((c) => callback(null, c), callback);
    }

    private async connectToPrimary(): Promise<void> {
      const target = await resolver.primary();
      this.target = target;
      aim(this, target);
      this.on('error', () => resolver.forget(target));
      try {
        await super.connect();
      } catch (err) {
        resolver.forget(target);
        throw err;
      }
      // Between asking and connecting the host may have turned standby (libpq checks each connection too).
      const { rows } = await super.query<{ transaction_read_only: string }>('SHOW transaction_read_only');
      if (rows[0]?.transaction_read_only !== 'off') {
        resolver.forget(target);
        await this.end().catch(() => {});
        throw Object.assign(new Error(`PostgreSQL host ${target.host}:${target.port} no longer accepts writes`), { code: '25006' });
      }
    }

    override query(...args: unknown[]): any {
      const watch = (err: unknown) => {
        if (err && (err as { code?: unknown }).code !== undefined && movedHostError(err)) this.moved();
      };
      const last = args[args.length - 1];
      if (typeof last === 'function')
        args[args.length - 1] = (err: unknown, res: unknown) => {
          watch(err);
          (last as (e: unknown, r: unknown) => void)(err, res);
        };
      const result = (super.query as (...a: unknown[]) => unknown).apply(this, args);
      if (result && typeof (result as Promise<unknown>).then === 'function') (result as Promise<unknown>).catch(watch);
      return result;
    }

    /** This host turned read-only or is shutting down: the next connection asks again, and this one is not reused. */
    private moved(): void {
      if (this.target) resolver.forget(this.target);
      // The pool discards a client that is ending when it is released. Marked a turn later, so
      // the ROLLBACK already on its way still runs and the statement's own error is what surfaces.
      setImmediate(() => ((this as unknown as { _ending: boolean })._ending = true));
    }
  } as unknown as typeof pg.Client;
}
