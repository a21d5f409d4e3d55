/** Human output: aligned tables and relative times. `--json` bypasses all of this. */

export function relativeTime(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '-';
  const diff = Date.parse(iso) - now;
  const abs = Math.abs(diff);
  const fmt =
    abs < 1000
      ? 'now'
      : abs < 60_000
        ? `${Math.round(abs / 1000)}s`
        : abs < 3_600_000
          ? `${Math.round(abs / 60_000)}m`
          : abs < 86_400_000
            ? `${Math.round(abs / 3_600_000)}h`
            : `${Math.round(abs / 86_400_000)}d`;
  if (fmt === 'now') return 'now';
  return diff < 0 ? `${fmt} ago` : `in ${fmt}`;
}

export function table(rows: Array<Record<string, unknown>>, columns: string[]): string {
  if (rows.length === 0) return '(none)';
  const cells = rows.map((r) => columns.map((c) => cell(r[c])));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i]!.length)));
  const line = (vals: string[]) =>
    vals
      .map((v, i) => v.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.toUpperCase())), ...cells.map(line)].join('\n');
}

export function keyValues(obj: Record<string, unknown>): string {
  const keys = Object.keys(obj);
  const w = Math.max(...keys.map((k) => k.length));
  return keys.map((k) => `${k.padEnd(w)}  ${cell(obj[k])}`).join('\n');
}

function cell(v: unknown): string {
  if (v === null || v === undefined) return '-';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '-';
  return ms < 1000
    ? `${ms}ms`
    : ms < 60_000
      ? `${(ms / 1000).toFixed(1)}s`
      : `${Math.floor(ms / 60_000)}m${Math.round((ms % 60_000) / 1000)}s`;
}
