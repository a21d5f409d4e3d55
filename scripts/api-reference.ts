/**
 * Generates docs/api-reference.md and docs/openapi.json from the route schemas (the same zod
 * schemas that validate requests). `npm run docs:api` rewrites them; test/api/api-reference.test.ts
 * fails when the committed copies are stale.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildServer } from '../src/api/server.ts';
import { KeyStore } from '../src/auth/keys.ts';
import { Engine } from '../src/engine/engine.ts';
import { openSqlite } from '../src/store/sqlite.ts';

type Json = Record<string, any>;

export async function generateApiReference(): Promise<{ openapi: string; markdown: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'baton-apiref-'));
  const store = openSqlite(join(dir, 'baton.sqlite'));
  try {
    await store.migrate();
    const engine = new Engine({ store, nodeId: 'api-reference' });
    const app = await buildServer({ engine, keys: new KeyStore(store), logger: false });
    await app.ready();
    const spec = (app as any).swagger() as Json;
    await app.close();
    engine.close();
    return { openapi: JSON.stringify(spec, null, 2) + '\n', markdown: toMarkdown(spec) };
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

function typeOf(s: Json | undefined): string {
  if (!s) return 'any';
  if (s.enum) return s.enum.map((v: unknown) => JSON.stringify(v)).join(' | ');
  if (s.anyOf) return s.anyOf.map(typeOf).join(' | ');
  if (s.type === 'array') return `${typeOf(s.items)}[]`;
  if (Array.isArray(s.type)) return s.type.join(' | ');
  return s.type ?? 'any';
}

const cell = (text: unknown) =>
  String(text ?? '')
    .replaceAll('|', '\\|')
    .replaceAll('\n', ' ');

function toMarkdown(spec: Json): string {
  const out: string[] = [
    '# API reference',
    '',
    '_Generated from the route schemas by `npm run docs:api`; do not edit. The same contract is',
    'served as OpenAPI 3 at `GET /openapi.json` (copy: [openapi.json](openapi.json)). The guide is',
    '[api.md](api.md)._',
    '',
  ];
  const byTag = new Map<string, string[]>();
  for (const [path, methods] of Object.entries(spec.paths as Json)) {
    for (const [method, op] of Object.entries(methods as Json)) {
      const tag = op.tags?.[0] ?? 'other';
      const lines: string[] = [`### \`${method.toUpperCase()} ${path}\``, '', cell(op.summary ?? ''), ''];
      const params = (op.parameters ?? []) as Json[];
      if (params.length) {
        lines.push('| parameter | in | type | required | description |', '|---|---|---|---|---|');
        for (const p of params)
          lines.push(
            `| \`${p.name}\` | ${p.in} | ${cell(typeOf(p.schema))} | ${p.required ? 'yes' : 'no'} | ${cell(p.description ?? p.schema?.description)} |`,
          );
        lines.push('');
      }
      const body = op.requestBody?.content?.['application/json']?.schema as Json | undefined;
      if (body?.properties) {
        const required = new Set<string>(body.required ?? []);
        lines.push('| body field | type | required | description |', '|---|---|---|---|');
        for (const [name, s] of Object.entries(body.properties as Json))
          lines.push(`| \`${name}\` | ${cell(typeOf(s))} | ${required.has(name) ? 'yes' : 'no'} | ${cell((s as Json).description)} |`);
        lines.push('');
      }
      const codes = Object.keys(op.responses ?? {});
      if (codes.length) lines.push(`Answers: ${codes.map((c) => `\`${c}\``).join(', ')}`, '');
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag)!.push(lines.join('\n'));
    }
  }
  for (const [tag, ops] of byTag) out.push(`## ${tag}`, '', ...ops);
  return out.join('\n').trimEnd() + '\n';
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { openapi, markdown } = await generateApiReference();
  const docs = fileURLToPath(new URL('../docs/', import.meta.url));
  writeFileSync(join(docs, 'openapi.json'), openapi);
  writeFileSync(join(docs, 'api-reference.md'), markdown);
  console.log('wrote docs/openapi.json and docs/api-reference.md');
}
