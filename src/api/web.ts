/**
 * The dashboard: static files built by Vite into web/dist (`npm ci` builds them through the
 * `prepare` script; `npm run build:web` rebuilds). Served at / with a tiny handler: the app is a
 * single page with hash routes, so only index.html and /assets/* exist.
 */
import type { FastifyPluginAsync } from 'fastify';
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const WEB_DIST = fileURLToPath(new URL('../../web/dist/', import.meta.url));

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.woff2': 'font/woff2',
};

const NOT_BUILT = `<!doctype html><meta charset="utf-8"><title>Baton</title>
<p>The dashboard is not built. Run <code>npm run build:web</code> (npm ci does it), then reload.
The API is up: see <a href="/openapi.json">/openapi.json</a>.</p>`;

export const webRoutes: FastifyPluginAsync<{ dir?: string }> = async (app, opts) => {
  const dir = opts.dir ?? WEB_DIST;
  const index = () => (existsSync(join(dir, 'index.html')) ? readFileSync(join(dir, 'index.html'), 'utf8') : NOT_BUILT);
  app.get('/', { schema: { hide: true } }, async (_req, reply) =>
    reply
      .header('content-type', 'text/html; charset=utf-8')
      .header('cache-control', 'no-cache')
      .header('x-frame-options', 'DENY')
      .send(index()),
  );
  app.get<{ Params: { file: string } }>('/assets/:file', { schema: { hide: true } }, async (req, reply) => {
    const file = req.params.file;
    // Vite's asset names are flat: anything with a path separator or dot-dot is not ours.
    if (!/^[A-Za-z0-9._-]+$/.test(file) || file.includes('..'))
      return reply.code(404).send({ error: 'not_found', message: 'no such asset' });
    try {
      const body = await readFile(join(dir, 'assets', file));
      // Names carry a content hash: cache them for good.
      return reply
        .header('content-type', TYPES[extname(file)] ?? 'application/octet-stream')
        .header('cache-control', 'public, max-age=31536000, immutable')
        .send(body);
    } catch {
      return reply.code(404).send({ error: 'not_found', message: 'no such asset' });
    }
  });
};
