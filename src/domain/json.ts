/**
 * JSON nesting depth, measured without recursion. JSON.stringify and every recursive walk over a
 * parsed value (redaction, schema checks) overflow the stack at a depth of a few thousand; a body
 * of 8 KB can reach that. Bodies are checked with this before anything recursive touches them.
 */

/** Deepest nesting accepted anywhere a JSON body comes in (API, webhooks, push answers, results). */
export const MAX_JSON_DEPTH = 100;

/** True when `text` nests objects/arrays deeper than `limit`. Strings are skipped, escapes included. */
export function jsonTooDeep(text: string, limit = MAX_JSON_DEPTH): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92 /* \ */) i++;
      else if (c === 34 /* " */) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 /* { */ || c === 91 /* [ */) {
      if (++depth > limit) return true;
    } else if (c === 125 /* } */ || c === 93 /* ] */) depth--;
  }
  return false;
}

export const tooDeepMessage = (where: string) => `${where}: JSON nested deeper than ${MAX_JSON_DEPTH} levels`;
