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

/**
 * The dashboard's Content-Security-Policy. The built app is one script and one stylesheet from
 * /assets, talking only to its own origin (fetch and EventSource); it has no inline script or
 * style element (React and uPlot set styles through the DOM, which style-src does not govern),
 * so nothing is allowed inline and nothing from elsewhere. `data:` images: the empty favicon.
 * test/server/browser.overview.test.ts runs the dashboard under it and fails on any violation.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

/** Headers on every dashboard response: its CSP, no MIME sniffing, no referrer beyond the origin, no framing. */
export const DASHBOARD_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-security-policy': DASHBOARD_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'same-origin',
  'x-frame-options': 'DENY', // frame-ancestors for browsers older than CSP level 2
});

export const webRoutes: FastifyPluginAsync<{ dir?: string }> = async (app, opts) => {
  const dir = opts.dir ?? WEB_DIST;
  const index = () => (existsSync(join(dir, 'index.html')) ? readFileSync(join(dir, 'index.html'), 'utf8') : NOT_BUILT);
  app.get('/', { schema: { hide: true } }, async (_req, reply) =>
    reply.headers(DASHBOARD_HEADERS).header('content-type', 'text/html; charset=utf-8').header('cache-control', 'no-cache').send(index()),
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
        .headers(DASHBOARD_HEADERS)
        .header('content-type', TYPES[extname(file)] ?? 'application/octet-stream')
        .header('cache-control', 'public, max-age=31536000, immutable')
        .send(body);
    } catch {
      return reply.code(404).headers(DASHBOARD_HEADERS).send({ error: 'not_found', message: 'no such asset' });
    }
  });
};
