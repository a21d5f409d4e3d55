/**
 * Baton's layers, checked by dependency-cruiser: `npx depcruise src --config .dependency-cruiser.cjs`.
 * Each layer imports only itself and the layers named in its `may` list (all below it), so a
 * reader can learn the code from the bottom up, and a change low down is never surprised by a
 * caller it cannot see. docs/architecture.md draws the same picture.
 *
 * Bottom to top:
 *   domain → foundation → store → engine → services → metrics (and telemetry, beside it) → mcp → api → server → cli
 * and, beside them, what an agent imports (the client and the worker SDK, shipped on their own
 * in issue #15), which sees only the domain and the wire contract.
 */

/** Paths of each layer (regular expressions over paths relative to the repository). */
const LAYERS = {
  domain: {
    path: '^src/domain/',
    why: 'Plain types, constant lists and pure helpers (states, error codes, outcomes, redaction). No I/O: everything else may read it.',
  },
  foundation: {
    path: '^src/(config|config-values|version)[.]ts$',
    why: 'The process settings (every BATON_* variable, read in config.ts) and the version: read once at start, by any layer above.',
  },
  store: {
    path: '^src/store/',
    why: 'The database: the StoreAdapter seam, the two dialects, migrations, signals. It knows tables, never what a row means to the engine.',
  },
  engine: {
    path: '^src/engine/',
    why: 'The state machine: the Engine facade and its sub-services (schedules, webhooks), one module per transition, the passes (reapOnce, tickSchedulesOnce) and the loop helper.',
  },
  services: {
    path: '^src/(auth|canary|delivery|retention)/',
    why: 'Services built on the engine: API keys, the canary, push delivery, retention. Each stands alone (see no-sibling-services).',
  },
  metrics: {
    path: '^src/metrics[.]ts$',
    why: "Prometheus: counts what the engine emits (its events) and reads the services' stats; nothing below imports it.",
  },
  telemetry: {
    path: '^src/telemetry/',
    why: "OpenTelemetry tracing: spans made from the engine's events, a Fastify hook and the loop helper's passes. Only src/server/up.ts loads it (lazily, when an OTLP endpoint is set), so no layer below knows about OpenTelemetry.",
  },
  contract: {
    path: '^src/(api/schemas([.]ts|/)|sse[.]ts$)',
    why: 'The wire contract: zod schemas of every HTTP body and the SSE reader, shared by the server and its clients.',
  },
  agent: {
    path: '^src/(client[.]ts|sdk[.]ts$|worker/)',
    why: 'What an agent imports: the HTTP client, the worker SDK and src/sdk.ts (the entry of packages/sdk). Only the domain and the wire contract, so it ships without the server.',
  },
  mcp: { path: '^src/mcp/', why: 'The MCP tools, over the HTTP client (an MCP process never loads the server).' },
  api: { path: '^src/api/', why: 'HTTP: routes call the engine facade and services (never a transition), errors map to HTTP here.' },
  server: { path: '^src/server/', why: '`baton up`: builds every service once and lists every background loop of a process (up.ts).' },
  cli: { path: '^src/cli/', why: 'The `baton` command: the top; nothing imports it but bin/baton.js.' },
};

/** Which layers each layer may import, besides itself. Anything in src/ not listed is refused. */
const MAY = {
  domain: [],
  foundation: ['domain'],
  store: ['domain', 'foundation'],
  engine: ['domain', 'foundation', 'store'],
  services: ['domain', 'foundation', 'store', 'engine'],
  metrics: ['domain', 'foundation', 'store', 'engine', 'services'],
  // Beside metrics: it subscribes to the engine's events and reads a finished execution's row by id.
  telemetry: ['domain', 'foundation', 'store', 'engine'],
  // The defaults the schemas document live in src/domain/defaults.ts, so the SDK package never loads config.ts.
  contract: ['domain'],
  agent: ['domain', 'contract'],
  mcp: ['domain', 'foundation', 'contract', 'agent', 'services'],
  // The API mounts MCP over HTTP at /mcp, so it sits above mcp.
  api: ['domain', 'foundation', 'store', 'engine', 'services', 'metrics', 'contract', 'agent', 'mcp'],
  server: ['domain', 'foundation', 'store', 'engine', 'services', 'metrics', 'telemetry', 'contract', 'agent', 'mcp', 'api'],
  cli: ['domain', 'foundation', 'store', 'engine', 'services', 'metrics', 'telemetry', 'contract', 'agent', 'mcp', 'api', 'server'],
};

const any = (names) => names.map((n) => `(${LAYERS[n].path})`).join('|');

// A path in one layer matches no other: the contract is carved out of api, the agent out of the top level.
const own = {
  api: { path: LAYERS.api.path, pathNot: LAYERS.contract.path },
};

const layerRules = Object.entries(MAY).map(([layer, may]) => ({
  name: `layer-${layer}`,
  severity: 'error',
  comment: `${LAYERS[layer].why} It may import: ${may.length ? may.join(', ') : 'nothing outside itself'}.`,
  from: own[layer] ?? { path: LAYERS[layer].path },
  to: { path: '^src/', pathNot: any([layer, ...may]) },
}));

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment:
        'No import cycles, type-only imports included: a cycle means two modules are one concept in two files, or a type lives too high. Move the shared part down (usually into src/domain/).',
      from: {},
      to: { circular: true },
    },
    {
      name: 'no-orphans',
      severity: 'error',
      comment:
        'A module nothing imports is dead code, unless it is an entry point: src/index.ts (the server package), src/sdk.ts (the SDK package), src/store/sqlite-reader-worker.js (a worker thread loaded by URL).',
      from: { orphan: true, pathNot: ['^src/index[.]ts$', '^src/sdk[.]ts$', '^src/store/sqlite-reader-worker[.]js$', '[.]d[.]ts$'] },
      to: {},
    },
    {
      name: 'domain-is-pure',
      severity: 'error',
      comment: "The domain does no I/O: of Node's own modules it may use crypto (ids, hashes) and util only.",
      from: { path: LAYERS.domain.path },
      to: { dependencyTypes: ['core'], pathNot: '^(node:)?(crypto|util)$' },
    },
    {
      name: 'no-sibling-services',
      severity: 'error',
      comment:
        'Services do not import each other (auth, canary, delivery, retention): what two of them share belongs in the engine or the domain, and metrics or the server combines them.',
      from: { path: '^src/(auth|canary|delivery|retention)/' },
      to: { path: '^src/(auth|canary|delivery|retention)/', pathNot: '^src/$1/' },
    },
    {
      name: 'routes-skip-the-store',
      severity: 'error',
      comment:
        'Routes and MCP tools reach the database only through the Engine facade (engine.logs, engine.idempotency, engine.subscribe, …) or a service: never the store, never SQL. `import type` of row types is fine; so is store/unavailable.ts, the classification of store errors the HTTP edge turns into 503.',
      from: { path: '^src/(api|mcp)/' },
      to: { path: '^src/store/', pathNot: '^src/store/unavailable[.]ts$', dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'routes-use-the-facade',
      severity: 'error',
      comment:
        'Routes, MCP tools and the CLI call the Engine facade, never a transition module directly: the facade announces every status change and appends its audit entry.',
      from: { path: '^src/(api|mcp|cli|server)/' },
      to: { path: '^src/engine/transitions/' },
    },
    {
      name: 'sdk-stays-small',
      severity: 'error',
      comment:
        'packages/sdk compiles everything src/sdk.ts reaches: only the agent layer, the wire contract and the domain, so an agent never installs or loads the server (issue #15; test/server/package.test.ts checks the compiled files too).',
      from: { path: '^src/sdk[.]ts$' },
      to: { reachable: true, path: '^src/', pathNot: any(['domain', 'contract', 'agent']) },
    },
    {
      name: 'sdk-needs-only-zod',
      severity: 'error',
      comment:
        "What the SDK package compiles may use Node's own modules and zod, its one dependency (packages/sdk/package.json). Another package here would be missing for an agent that installed only the SDK.",
      from: { path: any(['domain', 'contract', 'agent']) },
      to: {
        dependencyTypes: ['npm', 'npm-dev', 'npm-optional', 'npm-peer', 'npm-no-pkg', 'npm-unknown'],
        pathNot: '(^|/)node_modules/zod/',
      },
    },
    ...layerRules,
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    // Type-only imports count: a type cycle or a type reaching up a layer is still a wrong dependency.
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
