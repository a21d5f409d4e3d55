import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SecretBox } from '../domain/secret-box.ts';

/**
 * Encryption at rest for secrets Baton must be able to read back (push signing secrets): AES-256-GCM
 * with a random 96-bit nonce per value. The key comes from BATON_SECRET_KEY (64 hex characters or
 * base64 of 32 bytes; any other text is hashed to 32 bytes), or else from `<data dir>/secret.key`,
 * generated once with mode 0600. Every process sharing a database must use the same key: set
 * BATON_SECRET_KEY when processes do not share a data directory.
 */
export const SECRET_KEY_FILE = 'secret.key';
const VERSION = 'v1';

export type { SecretBox };

export function parseSecretKey(text: string): Buffer {
  const t = text.trim();
  if (/^[0-9a-fA-F]{64}$/.test(t)) return Buffer.from(t, 'hex');
  const b = Buffer.from(t, 'base64');
  if (b.length === 32 && /^[A-Za-z0-9+/_-]+=*$/.test(t)) return b;
  return createHash('sha256').update(t).digest();
}

export function secretBoxFromKey(key: Buffer): SecretBox {
  if (key.length !== 32) throw new Error('secret key must be 32 bytes');
  return {
    seal(plain) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      const ct = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
      return [VERSION, iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), ct.toString('base64url')].join(':');
    },
    open(sealed) {
      const [v, iv, tag, ct] = sealed.split(':');
      if (v !== VERSION || !iv || !tag || ct === undefined) throw new Error('not a sealed secret');
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
      decipher.setAuthTag(Buffer.from(tag, 'base64url'));
      try {
        return Buffer.concat([decipher.update(Buffer.from(ct, 'base64url')), decipher.final()]).toString('utf8');
      } catch {
        throw new Error(
          'cannot decrypt a stored secret: BATON_SECRET_KEY (or <data dir>/secret.key) differs from the one it was sealed with',
        );
      }
    },
  };
}

/** Read or create the key file (0600). Two processes racing: the loser reads the winner's file. */
function keyFromDataDir(dataDir: string): Buffer {
  const file = join(dataDir, SECRET_KEY_FILE);
  try {
    return parseSecretKey(readFileSync(file, 'utf8'));
  } catch (err: any) {
    if (err?.code !== 'ENOENT') throw err;
  }
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  try {
    writeFileSync(file, randomBytes(32).toString('hex') + '\n', { mode: 0o600, flag: 'wx' });
    chmodSync(file, 0o600);
  } catch (err: any) {
    if (err?.code !== 'EEXIST') throw err;
  }
  return parseSecretKey(readFileSync(file, 'utf8'));
}

/**
 * `secretKey` is BATON_SECRET_KEY's text (src/config.ts), or undefined for the data directory's key
 * file. The key is resolved on first use, so processes that never touch a secret create no file.
 */
export function lazySecretBox(dataDir: string, secretKey?: string): SecretBox {
  let box: SecretBox | undefined;
  const get = () => (box ??= secretBoxFromKey(secretKey ? parseSecretKey(secretKey) : keyFromDataDir(dataDir)));
  return { seal: (p) => get().seal(p), open: (s) => get().open(s) };
}
