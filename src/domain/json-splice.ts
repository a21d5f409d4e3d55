import { randomBytes } from 'node:crypto';

/** Stands in for a stored text while the rest is serialised: no client can write it (it is this process's secret). */
const MARK = `\u0000raw-${randomBytes(16).toString('hex')}-`;
/** A stand-in as it reads in JSON text, with its number. */
const MARKS = new RegExp(
  `${JSON.stringify(MARK)
    .slice(0, -1)
    .replace(/[\\^$.*+?()[\]{}|]/g, '\\$&')}(\\d+)"`,
  'g',
);

/**
 * JSON text built around stored JSON texts (results, payloads) without parsing them: parsing a
 * large stored value and serialising it again costs the event loop a walk of every key, a splice
 * a copy of the text. `raw` places a stored text in the value to be serialised; `stringify`
 * serialises it with each text where its stand-in stood.
 */
export class JsonSplice {
  private readonly texts: string[] = [];

  /** A stand-in for `text` (JSON already), to place in the value `stringify` is given. */
  raw(text: string): unknown {
    this.texts.push(text);
    return MARK + (this.texts.length - 1);
  }

  /** Whether any text was placed. */
  get used(): boolean {
    return this.texts.length > 0;
  }

  stringify(value: unknown): string {
    const out = JSON.stringify(value);
    return this.texts.length === 0 ? out : out.replace(MARKS, (_, i: string) => this.texts[Number(i)]!);
  }
}
