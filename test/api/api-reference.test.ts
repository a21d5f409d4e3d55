import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { generateApiReference } from '../../scripts/api-reference.ts';
import { STORE_KIND } from '../helpers/store.ts';

// The reference is generated from the schemas; a stale copy in docs/ fails here. Store-independent.
describe.runIf(STORE_KIND === 'sqlite')('docs/api-reference.md', () => {
  it('matches the route schemas (run `npm run docs:api` after changing a route)', async () => {
    const { openapi, markdown } = await generateApiReference();
    expect(readFileSync(new URL('../../docs/openapi.json', import.meta.url), 'utf8')).toBe(openapi);
    expect(readFileSync(new URL('../../docs/api-reference.md', import.meta.url), 'utf8')).toBe(markdown);
  });
});
