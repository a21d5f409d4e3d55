/**
 * JSON nesting depth, measured without recursion. JSON.stringify and every recursive walk over a
 * parsed value (redaction, schema checks) overflow the stack at a depth of a few thousand; a body
 * of 8 KB can reach that. Bodies are checked with this before anything recursive touches them.
 */

/** Deepest nesting accepted anywhere a JSON body comes in (API, webhooks, push answers, results). */
export const MAX_JSON_DEPTH = 100;

/**
 * Most values one JSON body sent to the API may hold, keys included. Parsing costs by the value,
 * not by the byte (megabytes of one string parse far faster than the same bytes of small keys), and so does
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
  /** A number past what a double holds (`1e400`): JSON.parse makes it Infinity, which is stored as null. */
  infinite: boolean;
}

const isDigit = (c: number) => c >= 48 && c <= 57;
const inNumber = (c: number) => isDigit(c) || c === 46 /* . */ || c === 101 || c === 69 /* e E */ || c === 43 || c === 45; /* + - */

/** Whether the number around `at` (a character of it) is finite as JSON.parse reads it. */
function finiteAt(text: string, at: number): boolean {
  let start = at;
  let end = at;
  while (start > 0 && inNumber(text.charCodeAt(start - 1))) start--;
  while (end < text.length && inNumber(text.charCodeAt(end))) end++;
  return Number.isFinite(Number(text.slice(start, end)));
}

/** Whether the exponent starting after `at` (an `e`) is positive and 300 or more: only such a number can overflow. */
function largeExponent(text: string, at: number): boolean {
  let j = at + 1;
  if (text.charCodeAt(j) === 45 /* - */) return false;
  if (text.charCodeAt(j) === 43 /* + */) j++;
  let exponent = 0;
  for (; j < text.length && isDigit(text.charCodeAt(j)) && exponent < 1e6; j++) exponent = exponent * 10 + text.charCodeAt(j) - 48;
  return exponent >= 300;
}

/** Where the string opened at `open` (a quote) ends: its closing quote, or the text's length. */
function stringEnd(text: string, open: number): number {
  // indexOf finds the next quote natively, many times faster than a loop over the characters; a quote after an odd run of backslashes is escaped.
  for (let q = text.indexOf('"', open + 1); q !== -1; q = text.indexOf('"', q + 1)) {
    let backslashes = 0;
    while (text.charCodeAt(q - 1 - backslashes) === 92 /* \ */) backslashes++;
    if (backslashes % 2 === 0) return q;
  }
  return text.length;
}

/**
 * Nesting depth, value count and overflowing numbers of `text`, in one pass without recursion.
 * Strings are skipped, escapes included. Only a number with a long run of digits or a large
 * exponent is converted to be checked.
 */
export function jsonShape(text: string, limit = MAX_JSON_DEPTH): JsonShape {
  let depth = 0;
  let values = 1;
  let infinite = false;
  let digits = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (isDigit(c)) {
      digits++;
      continue;
    }
    if (digits >= 300 || (digits > 0 && (c === 101 || c === 69) && largeExponent(text, i))) infinite ||= !finiteAt(text, i - 1);
    digits = 0;
    if (c === 34 /* " */) i = stringEnd(text, i);
    else if (c === 123 /* { */ || c === 91 /* [ */) {
      values++;
      if (++depth > limit) return { tooDeep: true, values, infinite };
    } else if (c === 125 /* } */ || c === 93 /* ] */) depth--;
    else if (c === 44 /* , */ || c === 58 /* : */) values++;
  }
  if (digits >= 300) infinite ||= !finiteAt(text, text.length - 1);
  return { tooDeep: false, values, infinite };
}

/** True when `text` nests objects/arrays deeper than `limit`. */
export const jsonTooDeep = (text: string, limit = MAX_JSON_DEPTH): boolean => jsonShape(text, limit).tooDeep;

export const tooDeepMessage = (where: string) => `${where}: JSON nested deeper than ${MAX_JSON_DEPTH} levels`;

export const tooManyValuesMessage = (where: string, values: number) =>
  `${where}: about ${values.toLocaleString('en-US')} JSON values (keys included), more than the ${MAX_JSON_VALUES.toLocaleString('en-US')} one request may hold; send it in parts`;

export const infiniteMessage = (where: string) =>
  `${where}: a number too large for a double (above 1.8e308, such as 1e400): it would be stored as null`;

/** A JSON text longer than this (a request body, a push answer) is handled in turns of its own. */
export const LARGE_JSON_CHARS = 256 * 1024;

/**
 * A member of a large JSON text at least this long, that is only stored, is checked and
 * serialised off the event loop (src/engine/json-thread.ts) rather than parsed on it. Answers
 * start splicing stored texts at the same length (src/api/raw-json.ts).
 */
export const RAW_MEMBER_MIN_CHARS = 64 * 1024;

/**
 * In a large body whose long values go to the JSON thread (src/api/json-off-thread.ts), the most
 * values the rest may hold: it is parsed on the event loop, and a legitimate rest is short fields
 * (a batch of 1,000 items holds ~25 values an item besides its payload).
 */
export const RAW_REST_MAX_VALUES = 50_000;

/**
 * Most object shapes (distinct sequences of named keys: the hidden classes a parser creates) a body
 * over LARGE_JSON_CHARS may hold in what is parsed on the event loop. Objects alike cost little, but
 * each new shape costs the parser a hidden class, so a body of many distinct shapes takes several
 * times as long to parse as the same bytes of alike objects. Counted on the JSON
 * thread before the event loop parses the body (src/api/json-off-thread.ts).
 */
export const MAX_JSON_SHAPES = 10_000;

export const tooManyShapesMessage = (where: string, shapes: number) =>
  `${where}: ${shapes.toLocaleString('en-US')} distinct object shapes (orders of keys), more than the ${MAX_JSON_SHAPES.toLocaleString('en-US')} a body over ${LARGE_JSON_CHARS / 1024} KiB may hold; send it in parts or with fewer distinct keys`;

/** Where one member of a JSON object has its value: `text.slice(start, end)`. */
export interface MemberSpan {
  key: string;
  start: number;
  end: number;
}

const isSpace = (c: number) => c === 32 || c === 10 || c === 13 || c === 9;

const firstNonSpace = (text: string) => {
  let i = 0;
  while (isSpace(text.charCodeAt(i))) i++;
  return i;
};

/**
 * Visit the members of the object, or the elements of the array, whose `{` or `[` is at `open`,
 * in one pass without parsing (strings skipped as in jsonShape); nothing for any other value.
 * `visit` gets the value's span, and a member's key as written (`text.slice(keyStart, keyEnd)`,
 * quotes included; -1 for an element) or an element's index. Nothing is allocated per child: a
 * body of 125,000 keys is scanned as fast as jsonShape scans it. Malformed text gives spans the
 * parser then refuses.
 */
function eachChild(
  text: string,
  open: number,
  visit: (start: number, end: number, keyStart: number, keyEnd: number, index: number) => void,
): void {
  const first = text.charCodeAt(open);
  if (first !== 123 /* { */ && first !== 91 /* [ */) return;
  const isObject = first === 123;
  let depth = 0;
  let keyStart = -1;
  let keyEnd = -1;
  let index = 0;
  let inValue = !isObject;
  let valueStart = -1;
  const close = (at: number) => {
    let end = at;
    while (end > valueStart && isSpace(text.charCodeAt(end - 1))) end--;
    if (inValue && valueStart >= 0) visit(valueStart, end, keyStart, keyEnd, index++);
    inValue = !isObject;
    valueStart = -1;
  };
  for (let i = open; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (depth === 1 && inValue && valueStart < 0 && !isSpace(c) && c !== 44 /* , */ && c !== 93 && c !== 125) valueStart = i;
    if (c === 34 /* " */) {
      const end = stringEnd(text, i);
      if (depth === 1 && !inValue) {
        keyStart = i;
        keyEnd = end + 1;
      }
      i = end;
    } else if (c === 123 /* { */ || c === 91 /* [ */) depth++;
    else if (c === 125 /* } */ || c === 93 /* ] */) {
      if (--depth === 0) {
        close(i);
        break;
      }
    } else if (depth === 1 && c === 58 /* : */ && !inValue) {
      inValue = true;
      valueStart = -1;
    } else if (depth === 1 && c === 44 /* , */ && inValue) close(i);
  }
}

/** Whether the key written at `text.slice(start, end)` (a JSON string) is `key` (a plain one): compared in place unless it has escapes. */
function keyIs(text: string, start: number, end: number, key: string): boolean {
  if (end - start === key.length + 2 && text.startsWith(key, start + 1)) return true;
  for (let i = start + 1; i < end - 1; i++) if (text.charCodeAt(i) === 92 /* \ */) return decodeKey(text.slice(start, end)) === key;
  return false;
}

/**
 * The members of the object `text` holds whose values' texts are at least `minChars` long. []
 * when the text is not an object.
 */
export function largeMembers(text: string, minChars: number): MemberSpan[] {
  const open = firstNonSpace(text);
  if (text.charCodeAt(open) !== 123 /* { */) return [];
  const spans: MemberSpan[] = [];
  eachChild(text, open, (start, end, keyStart, keyEnd) => {
    if (end - start >= minChars) spans.push({ key: decodeKey(text.slice(keyStart, keyEnd)), start, end });
  });
  return spans;
}

/**
 * The values of the top-level members `keys` of the JSON object `text`, parsing only those (one
 * scan; a key not there is absent): a stored answer's `execution_id` without its execution.
 */
export function membersOf(text: string, keys: readonly string[]): Record<string, unknown> {
  // fromEntries defines each key as its own (a `__proto__` key too), the later of two alike winning as in JSON.parse.
  return Object.fromEntries(
    largeMembers(text, 0)
      .filter((m) => keys.includes(m.key))
      .map((m) => [m.key, JSON.parse(text.slice(m.start, m.end))]),
  );
}

/** A value found by `spansAt`: where it is in the text, and its path from the top (keys and indexes). */
export interface PathSpan {
  path: string[];
  start: number;
  end: number;
}

/**
 * The values at `path` in `text` without parsing it: each segment a member's key, or `*` for
 * every element of an array (`items.*.payload`: each item's payload). What is not there, or not
 * of that shape, gives nothing. One pass over the text: a container on the path is walked into,
 * any other value skipped, so a large batch is scanned once whatever the path's length.
 */
export function spansAt(text: string, path: readonly string[]): PathSpan[] {
  const root = firstNonSpace(text);
  if (path.length === 0) return [{ path: [], start: root, end: text.length }];
  const found: PathSpan[] = [];
  if (isContainerFor(text, root, path[0]!)) walkPath(text, root, path, 0, [], found);
  return found;
}

/** Whether the value at `at` is the container a path segment descends into: an array for `*`, an object for a key. */
const isContainerFor = (text: string, at: number, segment: string) => text.charCodeAt(at) === (segment === '*' ? 91 /* [ */ : 123); /* { */

const skipSpace = (text: string, i: number) => {
  while (isSpace(text.charCodeAt(i))) i++;
  return i;
};

/**
 * The end of the value that starts at `i` (not a space): past a string's closing quote, past a
 * container's closing bracket (its strings skipped), or at the delimiter after a scalar.
 */
function valueEnd(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === 34 /* " */) return Math.min(stringEnd(text, i) + 1, text.length);
  if (c === 123 /* { */ || c === 91 /* [ */) {
    let depth = 0;
    for (let j = i; j < text.length; j++) {
      const d = text.charCodeAt(j);
      if (d === 34 /* " */) j = stringEnd(text, j);
      else if (d === 123 || d === 91) depth++;
      else if ((d === 125 /* } */ || d === 93) /* ] */ && --depth === 0) return j + 1;
    }
    return text.length;
  }
  let j = i;
  for (; j < text.length; j++) {
    const d = text.charCodeAt(j);
    if (d === 44 /* , */ || d === 93 || d === 125 || isSpace(d)) break;
  }
  return Math.max(j, i + 1);
}

/**
 * The children of the container at `open` (matching `path[depth]`) whose key or index matches it:
 * the last segment's values go to `found`, a container for the next segment is walked into.
 * Returns where the container ends. Malformed text gives spans the parser then refuses.
 */
function walkPath(text: string, open: number, path: readonly string[], depth: number, prefix: string[], found: PathSpan[]): number {
  const segment = path[depth]!;
  const isArray = segment === '*';
  const last = depth + 1 === path.length;
  let index = 0;
  let i = open + 1;
  while (i < text.length) {
    i = skipSpace(text, i);
    const c = text.charCodeAt(i);
    if (c === 93 /* ] */ || c === 125 /* } */) return i + 1;
    if (c === 44 /* , */) {
      i++;
      continue;
    }
    let match = true;
    if (!isArray) {
      if (c !== 34 /* " */) return text.length; // not a key: malformed
      const keyEnd = stringEnd(text, i) + 1;
      match = keyIs(text, i, keyEnd, segment);
      i = skipSpace(text, keyEnd);
      if (text.charCodeAt(i) === 58 /* : */) i = skipSpace(text, i + 1);
    }
    if (i >= text.length) break; // cut short: no value
    const name = isArray ? String(index++) : segment;
    if (match && !last && isContainerFor(text, i, path[depth + 1]!)) {
      i = walkPath(text, i, path, depth + 1, [...prefix, name], found);
      continue;
    }
    const end = valueEnd(text, i);
    if (match && last) found.push({ path: [...prefix, name], start: i, end });
    i = end;
  }
  return text.length;
}

/**
 * `text` with each span (in order, none inside another) replaced by the JSON string `mark` + its
 * index: what is left to parse once those values are handled elsewhere. `mark` should be one no
 * sender can have written (a random one per call): a later duplicate key then overrides its
 * placeholder, as JSON.parse would.
 */
export function withPlaceholders(text: string, spans: readonly { start: number; end: number }[], mark: string): string {
  let rest = '';
  let at = 0;
  spans.forEach((s, i) => {
    rest += text.slice(at, s.start) + JSON.stringify(mark + i);
    at = s.end;
  });
  return rest + text.slice(at);
}

function decodeKey(quoted: string): string {
  try {
    return JSON.parse(quoted) as string;
  } catch {
    return quoted;
  }
}

/**
 * A JSON value kept as its text: a large member of a request body or push answer that was checked
 * and serialised off the event loop (src/engine/json-thread.ts) instead of parsed on it. Whoever
 * stores it stores `text`.
 */
export class RawJson {
  constructor(readonly text: string) {}
}
