import type { FastifyInstance, InjectOptions } from 'fastify';
import { afterAll, beforeAll } from 'vitest';
import { buildServer } from '../../src/api/server.ts';
import { KeyStore } from '../../src/auth/keys.ts';
import type { Engine } from '../../src/engine/engine.ts';

export interface Answer {
  status: number;
  /** The parsed JSON body; null when the body is empty. */
  body: any;
}

export interface InProcessApi {
  /** Set in beforeAll: the API server over `engine` (Fastify's inject, no socket), its key store and an admin key. */
  app: FastifyInstance;
  keys: KeyStore;
  admin: string;
  adminId: string;
  /** A request as `key` (the admin's unless given; null sends no credentials). */
  call: (method: InjectOptions['method'], url: string, body?: unknown, key?: string | null) => Promise<Answer>;
}

/**
 * The API set-up the HTTP tests share: an admin key and `buildServer` over the test's engine, in
 * this process. Registers its own beforeAll/afterAll in the calling scope (after the hooks that
 * open the engine, so the server is closed before it); the fields are set once beforeAll has run.
 */
export function inProcessApi(engine: () => Engine): InProcessApi {
  const api: InProcessApi = {
    app: undefined as unknown as FastifyInstance,
    keys: undefined as unknown as KeyStore,
    admin: '',
    adminId: '',
    async call(method, url, body, key = api.admin) {
      const headers: Record<string, string> = key ? { authorization: `Bearer ${key}` } : {};
      const res = await api.app.inject({ method, url, headers, ...(body === undefined ? {} : { payload: body as any }) });
      return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : null };
    },
  };
  beforeAll(async () => {
    api.keys = new KeyStore(engine().store);
    const k = await api.keys.create({ name: 'admin', scope: 'admin' }, 'test');
    api.admin = k.key;
    api.adminId = k.row.id;
    api.app = await buildServer({ engine: engine(), keys: api.keys, logger: false });
  });
  afterAll(async () => {
    await api.app?.close();
  });
  return api;
}
