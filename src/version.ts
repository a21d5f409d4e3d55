import { readFileSync } from 'node:fs';

/**
 * Baton's version, from package.json, read once. The API's OpenAPI document, the MCP server's
 * handshake and `baton --version` all say this, so a release changes one place. Its own module
 * so that none of them loads another's stack (the MCP process never loads Fastify for it).
 */
export const VERSION: string = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string })
  .version;
