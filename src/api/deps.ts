import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { KeyStore } from '../auth/keys.ts';
import type { IdempotencySettings } from '../config.ts';
import type { Engine } from '../engine/engine.ts';

/**
 * What the API's routes are given, in its own module: server.ts registers the routes, so a
 * route that imported this from server.ts would close an import cycle.
 */
export interface ApiDeps {
  engine: Engine;
  keys: KeyStore;
  /** Idempotency-Key lifetime and in-flight wait (defaults: IDEMPOTENCY; `baton up`: BATON_IDEMPOTENCY_*). */
  idempotency?: Partial<IdempotencySettings>;
}

/** The Fastify instance a route plugin is given: what a helper registering part of its routes takes. */
export type RouteApp = Parameters<FastifyPluginAsyncZod<ApiDeps>>[0];

/** HTTP connection limits (defaults: CONNECTION_LIMITS in src/api/server.ts). */
export interface ConnectionLimits {
  /**
   * A request's headers and body must arrive within this long. It bounds a client that trickles
   * a body forever (holding a socket and a descriptor); it does not cut long responses — a
   * long-poll claim or an SSE stream has finished *receiving* its request at once. 30 s lets a
   * 1 MiB body through a slow link (≈ 35 KB/s).
   */
  requestTimeoutMs: number;
  /** Headers alone must arrive within this long (slowloris). */
  headersTimeoutMs: number;
  /**
   * Open connections one address may hold (through a trusted proxy: open requests one client
   * address may hold). Above it, new connections are closed at once (requests answered 429), so
   * one client cannot take every descriptor. `baton up`: BATON_MAX_CONNECTIONS_PER_ADDRESS.
   */
  maxConnectionsPerAddress: number;
  /**
   * Bytes of answers held for clients that have not read them, in all: past it, the connections
   * that read least recently are closed (src/api/slow-readers.ts). BATON_MAX_UNREAD_MIB.
   */
  maxUnreadBytes: number;
  /** The same on one connection: past it, that connection is closed. BATON_MAX_UNREAD_MIB_PER_CONNECTION. */
  maxUnreadBytesPerConnection: number;
}
