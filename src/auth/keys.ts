import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { NotFound, Unauthorized, BatonError } from '../domain/errors.ts';
import { appendAudit } from '../engine/audit.ts';
import type { StoreAdapter } from '../store/adapter.ts';
import type { ApiKeyRow } from '../store/schema.ts';

/**
 * API keys look like `bt_<16 hex id>_<43 char secret>`. Only a SHA-256 of the secret is stored:
 * the secret has 256 bits of entropy, so a fast hash is enough and a slow KDF would only cost
 * every request. The `bt_` prefix lets secret scanners (and the canary's G-04) recognise them.
 */
export const KEY_PREFIX = 'bt_';
const KEY_PATTERN = /^bt_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;
/** The first admin key has a fixed id, so processes starting together create it exactly once. */
export const BOOTSTRAP_KEY_ID = '0000000000000000';
export const ADMIN_KEY_FILE = 'admin.key';

/** Verified keys are cached this long: a revoked key may work for up to this long after. */
const CACHE_MS = 10_000;

export interface Principal {
  keyId: string;
  scope: 'admin' | 'agent';
  agent: string | null;
}

const hashSecret = (secret: string) => createHash('sha256').update(secret).digest('hex');

function mint(id?: string): { id: string; secret: string; key: string } {
  const keyId = id ?? randomBytes(8).toString('hex');
  const secret = randomBytes(32).toString('base64url');
  return { id: keyId, secret, key: `${KEY_PREFIX}${keyId}_${secret}` };
}

export class KeyStore {
  private readonly cache = new Map<string, { principal: Principal; until: number }>();
  /**
   * Keys this process has seen revoked since it started, so a request that passed verify() just
   * before the revocation can still be refused before it waits (a parked claim) without a read.
   */
  private readonly revoked = new Set<string>();
  constructor(private readonly store: StoreAdapter) {
    // A key revoked by any process (or with its agent) stops working here at once, not after CACHE_MS.
    store.subscribe('key', (id) => this.forget(id));
  }

  private forget(keyId: string): void {
    for (const [k, v] of this.cache) if (v.principal.keyId === keyId) this.cache.delete(k);
    if (this.revoked.size > 10_000) this.revoked.clear();
    this.revoked.add(keyId);
  }

  /** Whether this process has seen `keyId` revoked (by any process, or with its agent). */
  wasRevoked(keyId: string): boolean {
    return this.revoked.has(keyId);
  }

  async create(
    input: { name: string; scope: 'admin' | 'agent'; agent?: string | null },
    actor: string,
  ): Promise<{ row: ApiKeyRow; key: string }> {
    if (input.scope === 'agent' && !input.agent) {
      throw new BatonError('validation_error', "body.agent: required when scope is 'agent'");
    }
    if (input.scope === 'admin' && input.agent) {
      throw new BatonError('validation_error', "body.agent: only for scope 'agent' (an admin key is not scoped to an agent)");
    }
    const { id, secret, key } = mint();
    const now = this.store.now();
    const row = await this.store.transaction(async (tx) => {
      if (input.scope === 'agent') {
        const agent = await tx.selectFrom('agents').select('name').where('name', '=', input.agent!).executeTakeFirst();
        if (!agent) throw new NotFound('agent', input.agent!);
      }
      const inserted = await tx
        .insertInto('api_keys')
        .values({
          id,
          name: input.name,
          secret_hash: hashSecret(secret),
          scope: input.scope,
          agent: input.scope === 'agent' ? input.agent! : null,
          created_at: now,
          revoked_at: null,
        })
        .returningAll()
        .executeTakeFirstOrThrow();
      await appendAudit(tx, {
        at: now,
        actor,
        action: 'key.create',
        subject: id,
        detail: { scope: input.scope, agent: input.agent ?? null },
      });
      return inserted;
    });
    return { row, key };
  }

  list(): Promise<ApiKeyRow[]> {
    return this.store.db.selectFrom('api_keys').selectAll().orderBy('created_at').execute();
  }

  async revoke(id: string, actor: string): Promise<ApiKeyRow> {
    const now = this.store.now();
    const row = await this.store.transaction(async (tx) => {
      // The active admin keys, locked: two revokes at once cannot each leave the other's key as
      // "another admin key" and so revoke both (on SQLite the transaction is the lock).
      const admins = await this.store
        .lockRows(tx.selectFrom('api_keys').select('id').where('scope', '=', 'admin').where('revoked_at', 'is', null), 'wait')
        .execute();
      const updated = await tx
        .updateTable('api_keys')
        .set({ revoked_at: now })
        .where('id', '=', id)
        .where('revoked_at', 'is', null)
        .returningAll()
        .executeTakeFirst();
      const current = updated ?? (await tx.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst());
      if (!current) throw new NotFound('key', id);
      if (updated?.scope === 'admin' && admins.every((a) => a.id === id)) {
        // Nothing could be done with the server afterwards, and no key comes back on restart.
        throw new BatonError(
          'last_admin_key',
          `key '${id}' is the last active admin key; create another first (baton keys create NAME --admin), then revoke this one`,
        );
      }
      if (updated) await appendAudit(tx, { at: now, actor, action: 'key.revoke', subject: id });
      return current;
    });
    this.forget(id);
    this.store.publish('key', id);
    return row;
  }

  /**
   * The principal of a key verified within CACHE_MS and not revoked since, without a read (undefined:
   * ask verify). Lets a request that presents a known key pass without a promise.
   */
  cached(presented: string | undefined): Principal | undefined {
    if (!presented) return undefined;
    const hit = this.cache.get(presented);
    return hit && hit.until > performance.now() ? hit.principal : undefined;
  }

  /** Resolve a presented key to its principal, or throw Unauthorized. Constant-time on the secret. */
  async verify(presented: string | undefined): Promise<Principal> {
    if (!presented) throw new Unauthorized();
    const hit = this.cached(presented);
    if (hit) return hit;
    const m = KEY_PATTERN.exec(presented);
    if (!m) throw new Unauthorized('the API key is malformed');
    const row = await this.store.db.selectFrom('api_keys').selectAll().where('id', '=', m[1]!).executeTakeFirst();
    const expected = Buffer.from(row?.secret_hash ?? '0'.repeat(64), 'hex');
    const ok = timingSafeEqual(expected, Buffer.from(hashSecret(m[2]!), 'hex'));
    if (!row || !ok || row.revoked_at !== null) throw new Unauthorized('the API key is unknown or revoked');
    const principal: Principal = { keyId: row.id, scope: row.scope, agent: row.agent };
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(presented, { principal, until: performance.now() + CACHE_MS });
    return principal;
  }

  /**
   * On first start, create the admin key, save it to `<dataDir>/admin.key` (0600) and return it
   * so the caller can print it once. Returns null when an admin key already exists.
   */
  async ensureBootstrapKey(dataDir: string): Promise<BootstrapKey | null> {
    const { secret, key } = mint(BOOTSTRAP_KEY_ID);
    const now = this.store.now();
    const inserted = await this.store.transaction(async (tx) => {
      const res = await tx
        .insertInto('api_keys')
        .values({
          id: BOOTSTRAP_KEY_ID,
          name: 'admin (created on first start)',
          secret_hash: hashSecret(secret),
          scope: 'admin',
          agent: null,
          created_at: now,
          revoked_at: null,
        })
        .onConflict((oc) => oc.column('id').doNothing())
        .returning('id')
        .executeTakeFirst();
      const created = res !== undefined;
      if (created)
        await appendAudit(tx, {
          at: now,
          actor: 'system',
          action: 'key.create',
          subject: BOOTSTRAP_KEY_ID,
          detail: { scope: 'admin', bootstrap: true },
        });
      return created;
    });
    if (!inserted) return null;
    return { key, replacedKeyFile: writeKeyFile(dataDir, key) };
  }
}

/** The admin key a first start created, and where the key file it replaced was kept (if any). */
export interface BootstrapKey {
  key: string;
  replacedKeyFile?: string;
}

/**
 * Save `key` as `<dataDir>/admin.key` (0600). A key file already there that holds another key
 * (another store's first start in the same directory: SQLite, then PostgreSQL) is never
 * overwritten: it is renamed to `admin.key.replaced-<time>` first, and that path is returned.
 */
export function writeKeyFile(dataDir: string, key: string): string | undefined {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const file = join(dataDir, ADMIN_KEY_FILE);
  let keptAs: string | undefined;
  const previous = readKeyFile(dataDir);
  if (previous !== undefined && previous !== key) {
    // A file name's stamp, for the operator reading the directory: this machine's clock.
    // eslint-disable-next-line no-restricted-syntax
    const stamp = new Date()
      .toISOString()
      .replace(/[-:]/g, '')
      .replace(/\.\d+Z$/, 'Z');
    keptAs = `${file}.replaced-${stamp}`;
    for (let n = 2; existsSync(keptAs); n++) keptAs = `${file}.replaced-${stamp}-${n}`;
    renameSync(file, keptAs);
  }
  writeFileSync(file, key + '\n', { mode: 0o600 });
  chmodSync(file, 0o600);
  return keptAs;
}

export function readKeyFile(dataDir: string): string | undefined {
  const file = join(dataDir, ADMIN_KEY_FILE);
  return existsSync(file) ? readFileSync(file, 'utf8').trim() : undefined;
}
