import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { schemaFile } from '../../scripts/schema-dump.ts';
import { generateSchemaFile } from '../../scripts/schema.ts';
import { STORE_KIND } from '../helpers/store.ts';

describe(`the committed schema file (${STORE_KIND})`, () => {
  it('is what a freshly migrated store holds (else run `npm run schema`)', async (ctx) => {
    const committed = readFileSync(schemaFile(STORE_KIND), 'utf8');
    const { text, serverMajor } = await generateSchemaFile(STORE_KIND);
    // PostgreSQL deparses definitions a little differently from one major to the next: the file
    // holds one server's text (its header names it), compared on that major only.
    const major = /as PostgreSQL (\d+) reports it/.exec(committed)?.[1];
    if (STORE_KIND === 'postgres' && major !== serverMajor)
      ctx.skip(`the schema file was written by PostgreSQL ${major}, this server is ${serverMajor}`);
    expect(text, `src/store/schema.${STORE_KIND}.sql is stale: run \`npm run schema\` (scripts/schema.ts) and commit it`).toBe(committed);
  });
});
