// Naming ids by first appearance, for comparing what different stores wrote (differential.ts).

/** Execution, lease, group and subscription ids in any string (ids inside JSON texts and actors too). */
const ID = /(ex|ls|gr|su)_[A-Za-z0-9_-]{22}/g;
const LETTER: Record<string, string> = { ex: 'E', ls: 'T', gr: 'G', su: 'S' };
/** Serial ids of history rows: their order is kept (rows are read in it), their values are not compared. */
export const DROPPED = new Set(['id']);

export class Naming {
  private readonly names = new Map<string, string>();
  private readonly reals = new Map<string, string>();
  private readonly counts = new Map<string, number>();

  name(real: string): string {
    let n = this.names.get(real);
    if (n === undefined) {
      const letter = LETTER[real.slice(0, 2)]!;
      const count = (this.counts.get(letter) ?? 0) + 1;
      this.counts.set(letter, count);
      n = `${letter}${count}`;
      this.names.set(real, n);
      this.reals.set(n, real);
    }
    return n;
  }

  /**
   * Name the execution ids in `v` not named yet, in the order of the ids: an execution id starts
   * with its creation time and counts up within a millisecond, so that is the order they were
   * made in, whatever order a statement without ORDER BY returned them in.
   */
  nameNewExecutions(v: unknown): void {
    const found = JSON.stringify(v)?.match(ID) ?? [];
    for (const id of [...new Set(found)].filter((x) => x.startsWith('ex_')).sort()) this.name(id);
  }

  real(name: string): string | undefined {
    return this.reals.get(name);
  }

  /** `v` with every id replaced by its name; `drop`: keys left out of objects (serial ids). */
  normalise(v: unknown, drop: ReadonlySet<string> = new Set()): unknown {
    if (typeof v === 'string') return v.replace(ID, (m) => this.name(m));
    if (Array.isArray(v)) return v.map((x) => this.normalise(x, drop));
    if (v !== null && typeof v === 'object') {
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) if (!drop.has(k)) out[k] = this.normalise(x, drop);
      return out;
    }
    return v;
  }
}
