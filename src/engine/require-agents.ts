import { NotFound } from '../domain/errors.ts';
import type { Kysely } from 'kysely';
import type { DB } from '../store/schema.ts';

/** Every named agent exists (one read), or NotFound for the first that does not: lists and filters that name agents answer 404, not an empty page. */
export async function requireAgents(db: Kysely<DB>, names: readonly string[]): Promise<void> {
  const unique = [...new Set(names)];
  if (unique.length === 0) return;
  const found = new Set((await db.selectFrom('agents').select('name').where('name', 'in', unique).execute()).map((a) => a.name));
  const missing = unique.find((n) => !found.has(n));
  if (missing !== undefined) throw new NotFound('agent', missing);
}
