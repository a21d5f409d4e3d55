/**
 * JSON nesting depth, measured without recursion. JSON.stringify and every recursive walk over a
 * parsed value (redaction, schema checks) overflow the stack at a depth of a few thousand; a body
 * of 8 KB can reach that. Bodies are checked with this before anything recursive touches them.
 */

/** Deepest nesting accepted anywhere a JSON body comes in (API, webhooks, push answers, results). */
export const MAX_JSON_DEPTH = 100;

/**
 * Most values one JSON body sent to the API may hold, keys included. Parsing costs by the value,
 * not by the byte (4 MiB of one string parses in about 3 ms, 4 MiB of small keys in about 80), and so does
 * every later walk (validation, redaction, serialising): at this bound each of those steps stays
 * within ~50 ms, so one client's body cannot hold the event loop for everybody else.
 */
export const MAX_JSON_VALUES = 250_000;

/** What one scan of a JSON text tells before it is parsed. */
export interface JsonShape {
  /** Nested deeper than the limit (the scan stopped there). */
  tooDeep: boolean;
  /**
   * About how many values it holds, keys included: one per `{`, `[`, `,` and `:` outside strings,
   * plus one (exact for any text without empty objects or arrays, one more for each of those).
   */
  values: number;
}

/** Nesting depth and value count of `text`, in one pass without recursion. Strings are skipped, escapes included. */
export function jsonShape(text: string, limit = MAX_JSON_DEPTH): JsonShape {
  let depth = 0;
  let values = 1;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92 /* \ */) i++;
      else if (c === 34 /* " */) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 /* { */ || c === 91 /* [ */) {
      values++;
      if (++depth > limit) return { tooDeep: true, values };
    } else if (c === 125 /* } */ || c === 93 /* ] */) depth--;
    else if (c === 44 /* , */ || c === 58 /* : */) values++;
  }
  return { tooDeep: false, values };
}

/** True when `text` nests objects/arrays deeper than `limit`. */
export const jsonTooDeep = (text: string, limit = MAX_JSON_DEPTH): boolean => jsonShape(text, limit).tooDeep;

export const tooDeepMessage = (where: string) => `${where}: JSON nested deeper than ${MAX_JSON_DEPTH} levels`;

export const tooManyValuesMessage = (where: string, values: number) =>
  `${where}: about ${values.toLocaleString('en-US')} JSON values (keys included), more than the ${MAX_JSON_VALUES.toLocaleString('en-US')} one request may hold; send it in parts`;
