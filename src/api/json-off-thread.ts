/**
 * The API's half of src/engine/json-thread.ts: a route opts in (`config.rawJsonMembers`) and its
 * body's long members of those names are checked and serialised on the JSON thread, never parsed
 * on the event loop (src/api/server.ts's JSON parser calls parseAroundLongMembers).
 */
import { randomUUID } from 'node:crypto';
import { BatonError } from '../domain/errors.ts';
import { largeMembers, RAW_MEMBER_MIN_CHARS, RawJson } from '../domain/json.ts';
import { canonicalJsonOffThread, OffThreadJsonError } from '../engine/json-thread.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Top-level body members this route only stores (a completion's `result`): when long, checked
     * and serialised off the event loop and handed to the route as RawJson. Any other long member
     * of such a route's body is refused: nothing else it takes is that long.
     */
    rawJsonMembers?: readonly string[];
  }
}

/**
 * Parse `text` on this thread except its long members: those named in `members` come back as
 * RawJson from the worker thread; any other long one is refused (400 naming it). `parse` is the
 * body parser for what is left (short: each long member is replaced by a placeholder).
 */
export async function parseAroundLongMembers(
  text: string,
  members: readonly string[],
  parse: (text: string) => Promise<unknown>,
): Promise<unknown> {
  const spans = largeMembers(text, RAW_MEMBER_MIN_CHARS);
  if (spans.length === 0) return parse(text);
  const other = spans.find((s) => !members.includes(s.key));
  if (other) {
    const n = (other.end - other.start).toLocaleString('en-US');
    throw new BatonError(
      'validation_error',
      `body.${other.key}: ${n} characters of JSON; this route takes that much only in ${members.join(', ')}`,
    );
  }
  // A placeholder no client can have sent: a later duplicate key overrides it, as JSON.parse would.
  const mark = `baton-raw-${randomUUID()}`;
  let rest = '';
  let at = 0;
  for (const s of spans) {
    rest += text.slice(at, s.start) + JSON.stringify(mark);
    at = s.end;
  }
  rest += text.slice(at);
  const [body, texts] = await Promise.all([
    parse(rest),
    Promise.all(
      spans.map((s) =>
        canonicalJsonOffThread(text.slice(s.start, s.end)).catch((err: unknown) => {
          if (err instanceof OffThreadJsonError) throw new BatonError('invalid_json', `body.${s.key}: ${err.message}`);
          throw err;
        }),
      ),
    ),
  ]);
  if (body !== null && typeof body === 'object') {
    const b = body as Record<string, unknown>;
    spans.forEach((s, i) => {
      if (b[s.key] === mark) b[s.key] = new RawJson(texts[i]!);
    });
  }
  return body;
}
