/**
 * Encryption at rest for the secrets Baton must read back (push signing secrets). The engine
 * seals and the dispatcher opens through this interface; the implementation (AES-256-GCM, the key
 * from BATON_SECRET_KEY or `<data dir>/secret.key`) is src/delivery/secrets.ts, which `baton up`
 * injects, so the engine never imports the key file's I/O.
 */
export interface SecretBox {
  seal(plain: string): string;
  open(sealed: string): string;
}

/** The box of an engine built without one: any use says how to give it one. */
export const NO_SECRET_BOX: SecretBox = Object.freeze({
  seal: refuse,
  open: refuse,
});

function refuse(): never {
  throw new Error(
    'this engine has no secret box: pass `secrets` to new Engine() (lazySecretBox(dataDir) from src/delivery/secrets.ts, as `baton up` does)',
  );
}
