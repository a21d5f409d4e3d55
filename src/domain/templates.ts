import { BatonError } from './errors.ts';

/**
 * Templates for work that composition creates: a subscription's message and payload,
 * a group join's message. A placeholder is `{{path}}` with a dotted path into the context
 * (`source.id`, `source.error.message`), optionally followed by a JSON pointer (RFC 6901) into
 * the value found there: `{{source.result#/summary/title}}`.
 *
 * - In a string, placeholders interpolate: strings as they are, numbers and booleans as text,
 *   objects and arrays as compact JSON, a missing value or null as the empty string.
 * - A JSON string that is exactly one placeholder is replaced by the value itself (its type
 *   kept; missing becomes null), so `{"pr": "{{source.result#/pr}}"}` can carry a number.
 * - Arrays and objects are walked (object keys are literal). The walk recurses only as deep as
 *   the template, which the API bounds (MAX_JSON_DEPTH); values from the context are inserted,
 *   never walked.
 *
 * Rendering is pure and total: no input throws. Validation (at creation) is where a bad path is
 * an error naming the field.
 */

/** `{{ path }}` or `{{ path#/json/pointer }}`; anything else between braces stays literal text. */
const PLACEHOLDER = /\{\{\s*([^{}#\s]+)(?:#([^{}\s]*))?\s*\}\}/g;
const SEGMENT = /^[A-Za-z0-9_-]+$/;
const ARRAY_INDEX = /^(0|[1-9]\d*)$/;

interface Placeholder {
  path: string[];
  pointer: string[] | null;
}

/** The placeholder's path and pointer, or undefined when either is malformed. */
function parsePlaceholder(path: string, pointer: string | undefined): Placeholder | undefined {
  const segments = path.split('.');
  if (!segments.every((s) => SEGMENT.test(s))) return undefined;
  if (pointer === undefined || pointer === '') return { path: segments, pointer: null };
  if (!pointer.startsWith('/')) return undefined;
  return {
    path: segments,
    pointer: pointer
      .slice(1)
      .split('/')
      .map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~')),
  };
}

/** One step into a JSON value: own properties of objects, canonical indices of arrays. */
function step(value: unknown, key: string): unknown {
  if (Array.isArray(value)) return ARRAY_INDEX.test(key) ? value[Number(key)] : undefined;
  if (value !== null && typeof value === 'object' && Object.hasOwn(value, key)) return (value as Record<string, unknown>)[key];
  return undefined;
}

function lookup(context: Record<string, unknown>, p: Placeholder): unknown {
  let v: unknown = context;
  for (const key of p.path) v = step(v, key);
  for (const key of p.pointer ?? []) v = step(v, key);
  return v;
}

/** NUL and lone surrogates: not text a store can hold (src/api/schemas/text.ts refuses them from clients). */
const NOT_TEXT = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const NOT_TEXT_ALL = new RegExp(NOT_TEXT.source, 'g');

/**
 * How a value reads inside a string: a string as it is, anything else as its JSON. A NUL or a
 * lone surrogate from the data (a payload or result may hold them; PostgreSQL text cannot) becomes
 * U+FFFD, so a rendered message is always storable.
 */
function asText(v: unknown): string {
  const text = asRawText(v);
  return NOT_TEXT.test(text) ? text.replace(NOT_TEXT_ALL, '\uFFFD') : text;
}

function asRawText(v: unknown): string {
  if (v === undefined || v === null) return '';
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  return JSON.stringify(v) ?? '';
}

/** Characters the rendering may still produce; rendering stops (returns TOO_LARGE) past it. */
interface Budget {
  left: number;
  /** Sizes of values already measured, by placeholder text: in this rendering, or in every rendering of one context (RenderSizes). */
  sizes: RenderSizes;
}

/**
 * Sizes of the values a context's placeholders give, measured once: share one between renderings
 * of the same context (a source's outcome rendered for each of its subscriptions), so a large
 * result is serialised to be measured once, not once per template.
 */
export type RenderSizes = Map<string, number>;

const TOO_LARGE: unique symbol = Symbol('template too large');

function spend(budget: Budget, n: number): boolean {
  budget.left -= n;
  return budget.left >= 0;
}

function renderString(s: string, context: Record<string, unknown>, budget: Budget, keepTypes = true): unknown {
  const whole = keepTypes ? /^\{\{\s*([^{}#\s]+)(?:#([^{}\s]*))?\s*\}\}$/.exec(s) : null;
  if (whole) {
    const p = parsePlaceholder(whole[1]!, whole[2]);
    const v = p ? lookup(context, p) : undefined;
    let size = budget.sizes.get(s);
    if (size === undefined) {
      size = v === undefined ? 4 : (JSON.stringify(v)?.length ?? 4);
      budget.sizes.set(s, size);
    }
    if (!spend(budget, size)) return TOO_LARGE;
    return v === undefined ? null : v;
  }
  let out = '';
  let last = 0;
  for (const m of s.matchAll(PLACEHOLDER)) {
    const literal = s.slice(last, m.index);
    // Known to be too long already: not serialised again to find out.
    const known = budget.sizes.get(`text:${m[0]}`);
    if (known !== undefined && budget.left < literal.length + known) return TOO_LARGE;
    const p = parsePlaceholder(m[1]!, m[2]);
    const text = p ? asText(lookup(context, p)) : '';
    budget.sizes.set(`text:${m[0]}`, text.length);
    if (!spend(budget, literal.length + text.length)) return TOO_LARGE;
    out += literal + text;
    last = m.index + m[0].length;
  }
  if (!spend(budget, s.length - last)) return TOO_LARGE;
  return out + s.slice(last);
}

function render(template: unknown, context: Record<string, unknown>, budget: Budget): unknown {
  if (typeof template === 'string') return renderString(template, context, budget);
  if (Array.isArray(template)) {
    const out: unknown[] = [];
    for (const item of template) {
      const v = render(item, context, budget);
      if (v === TOO_LARGE) return TOO_LARGE;
      out.push(v);
    }
    return out;
  }
  if (template !== null && typeof template === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, item] of Object.entries(template)) {
      const v = render(item, context, budget);
      if (v === TOO_LARGE) return TOO_LARGE;
      // defineProperty: a key named __proto__ stays a plain key.
      Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    }
    return out;
  }
  if (!spend(budget, String(template).length)) return TOO_LARGE;
  return template;
}

/** The template with its placeholders filled from `context` (see the module comment). Never throws. */
export function renderTemplate(template: unknown, context: Record<string, unknown>): unknown {
  return render(template, context, { left: Infinity, sizes: new Map() });
}

/** A string template, always a string: every placeholder interpolates (a message). */
export function renderText(template: string, context: Record<string, unknown>): string {
  return renderString(template, context, { left: Infinity, sizes: new Map() }, false) as string;
}

/**
 * Like renderTemplate and renderText, but gives up (undefined) once the output would pass about
 * `maxChars` characters: a template that repeats a large value many times is refused without
 * building it. Strings count their length, inserted values their compact JSON.
 */
export function renderWithin(
  template: unknown,
  context: Record<string, unknown>,
  maxChars: number,
  asString = false,
  sizes: RenderSizes = new Map(),
): unknown {
  const budget: Budget = { left: maxChars, sizes };
  const v = asString && typeof template === 'string' ? renderString(template, context, budget, false) : render(template, context, budget);
  return v === TOO_LARGE ? undefined : v;
}

/**
 * What a template may refer to: a tree of names. `'any'` is a JSON value whose inside is free
 * (further path segments and a pointer are allowed); `'leaf'` a scalar (nothing below it);
 * a key `'*'` matches any one segment (array positions).
 */
export type TemplateShape = 'any' | 'leaf' | { readonly [key: string]: TemplateShape };

/** Lengths of the arrays a template may index, by path (`{ members: 3 }`: members.0 to members.2). */
export type TemplateArrays = Readonly<Record<string, number>>;

function checkPath(p: Placeholder, shape: TemplateShape, arrays: TemplateArrays): string | undefined {
  let node: TemplateShape = shape;
  for (let i = 0; i < p.path.length; i++) {
    if (node === 'any') return undefined;
    const seg = p.path[i]!;
    if (node === 'leaf') return `'${p.path.slice(0, i).join('.')}' has no fields`;
    const array = p.path.slice(0, i).join('.');
    const length = Object.hasOwn(arrays, array) ? arrays[array]! : undefined;
    if (length !== undefined && !(/^\d+$/.test(seg) && Number(seg) < length))
      return `'${array}.${seg}' is not one of ${array}.0 to ${array}.${length - 1}`;
    const next: TemplateShape | undefined = Object.hasOwn(node, seg) ? node[seg] : Object.hasOwn(node, '*') ? node['*'] : undefined;
    if (next === undefined) {
      const known = Object.keys(node).filter((k) => k !== '*');
      const at = p.path.slice(0, i + 1).join('.');
      return `unknown '${at}'${known.length > 0 ? ` (known: ${known.map((k) => p.path.slice(0, i).concat(k).join('.')).join(', ')})` : ''}`;
    }
    node = next;
  }
  if (p.pointer !== null && node !== 'any') return `'${p.path.join('.')}' is not a JSON value a pointer can enter`;
  return undefined;
}

/**
 * Check every placeholder of `template` against `shape`; a malformed or unknown one is a 400
 * validation_error naming `field` (e.g. `body.message`) and the placeholder, and so is an index
 * past the end of an array whose length `arrays` gives.
 */
export function validateTemplate(template: unknown, shape: TemplateShape, field: string, arrays: TemplateArrays = {}): void {
  const todo: Array<{ value: unknown; at: string }> = [{ value: template, at: field }];
  for (let item = todo.pop(); item; item = todo.pop()) {
    const { value, at } = item;
    if (typeof value === 'string') {
      for (const m of value.matchAll(PLACEHOLDER)) {
        const p = parsePlaceholder(m[1]!, m[2]);
        const problem = p
          ? checkPath(p, shape, arrays)
          : 'a path is dot-separated names (letters, digits, _ and -), a pointer starts with /';
        if (problem) throw new BatonError('validation_error', `${at}: placeholder ${m[0]}: ${problem}`);
      }
      // `{{` that is not a placeholder is most likely a typo; say so rather than render it as text.
      const rest = value.replace(PLACEHOLDER, '');
      if (rest.includes('{{'))
        throw new BatonError('validation_error', `${at}: '{{' without a valid placeholder ({{path}} or {{path#/pointer}})`);
    } else if (Array.isArray(value)) {
      value.forEach((v, i) => todo.push({ value: v, at: `${at}[${i}]` }));
    } else if (value !== null && typeof value === 'object') {
      for (const [k, v] of Object.entries(value)) todo.push({ value: v, at: `${at}.${k}` });
    }
  }
}
