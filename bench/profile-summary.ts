/**
 * Summarise a V8 .cpuprofile (from `node --cpu-prof`): where the samples landed, by package /
 * source file and by function, self time and inclusive time.
 *
 *   node --import tsx bench/profile-summary.ts <file.cpuprofile> [--top 30] [--filter src/] [--long-tasks 30] [--from 5] [--to 9]
 *
 * `--from S` / `--to S`: only the samples taken that many seconds into the profile (a phase of a
 * run, without the start's module loading).
 *
 * `--long-tasks N`: also list each stretch of at least N ms in which the thread was never idle
 * (a synchronous step holding the event loop), with the functions that took most of it.
 *
 * Typical use:
 *   node --cpu-prof --cpu-prof-dir /tmp/prof --import tsx bench/run.ts --store sqlite --mode inproc --only w1
 *   npm run bench -- --store sqlite --mode http --only w1 --server-cpu-prof   # profiles the server process
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    top: { type: 'string', default: '30' },
    filter: { type: 'string' },
    'long-tasks': { type: 'string' },
    from: { type: 'string' },
    to: { type: 'string' },
  },
});
if (positionals.length === 0) {
  console.error('usage: profile-summary.ts <file.cpuprofile> [--top N] [--filter substring]');
  process.exit(2);
}
const top = Number(values.top);

/** Which bucket a frame belongs to: a package, a src/ or bench/ file, node internals, or V8 states. */
function bucket(cf: CallFrame): string {
  const u = cf.url;
  if (!u) {
    if (['(garbage collector)', '(idle)', '(program)', '(root)'].includes(cf.functionName)) return cf.functionName;
    return '(native)';
  }
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(u);
  if (nm) return nm[1]!;
  if (u.startsWith('node:')) return `node:${u.slice(5).split('/')[0]}`;
  const src = /\/((?:src|bench|test)\/.*)$/.exec(u);
  if (src) return src[1]!;
  return u;
}
const fnKey = (cf: CallFrame) => `${cf.functionName || '(anonymous)'}  ${bucket(cf)}${cf.url ? `:${cf.lineNumber + 1}` : ''}`;

for (const file of positionals) {
  const p: Profile = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const selfUs = new Map<number, number>();
  const fromUs = values.from === undefined ? -Infinity : Number(values.from) * 1e6;
  const toUs = values.to === undefined ? Infinity : Number(values.to) * 1e6;
  let at = 0;
  for (let i = 0; i < p.samples.length; i++) {
    at += p.timeDeltas[i] ?? 0;
    if (at < fromUs || at > toUs) continue;
    const id = p.samples[i]!;
    const dt = p.timeDeltas[i + 1] ?? 0;
    selfUs.set(id, (selfUs.get(id) ?? 0) + dt);
  }
  let total = 0;
  for (const v of selfUs.values()) total += v;
  const idle = [...selfUs].filter(([id]) => byId.get(id)!.callFrame.functionName === '(idle)').reduce((a, [, v]) => a + v, 0);
  const busy = total - idle;

  const selfByBucket = new Map<string, number>();
  const selfByFn = new Map<string, number>();
  const inclByFn = new Map<string, number>();
  const inclByBucket = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const cf = byId.get(id)!.callFrame;
    if (cf.functionName === '(idle)') continue;
    selfByBucket.set(bucket(cf), (selfByBucket.get(bucket(cf)) ?? 0) + us);
    selfByFn.set(fnKey(cf), (selfByFn.get(fnKey(cf)) ?? 0) + us);
    // inclusive: every distinct function / bucket on the stack gets the sample once
    const seenF = new Set<string>();
    const seenB = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const c = byId.get(cur)!.callFrame;
      const k = fnKey(c);
      if (!seenF.has(k)) {
        seenF.add(k);
        inclByFn.set(k, (inclByFn.get(k) ?? 0) + us);
      }
      const b = bucket(c);
      if (!seenB.has(b)) {
        seenB.add(b);
        inclByBucket.set(b, (inclByBucket.get(b) ?? 0) + us);
      }
    }
  }
  const pct = (us: number) => `${((100 * us) / busy).toFixed(1).padStart(5)} %`;
  const ms = (us: number) => `${(us / 1000).toFixed(0).padStart(7)} ms`;
  const show = (title: string, m: Map<string, number>) => {
    console.log(`\n${title}`);
    const entries = [...m]
      .filter(([k]) => !values.filter || k.includes(values.filter))
      .sort((x, y) => y[1] - x[1])
      .slice(0, top);
    for (const [k, v] of entries) console.log(`${ms(v)} ${pct(v)}  ${k}`);
  };
  console.log(
    `${file}\n  wall ${((p.endTime - p.startTime) / 1e6).toFixed(2)} s, busy (non-idle) ${(busy / 1e6).toFixed(2)} s; percentages are of busy time`,
  );
  show('self time by package / file', selfByBucket);
  show('inclusive time by package / file (a sample counts once per bucket on its stack)', inclByBucket);
  show('self time by function', selfByFn);
  show('inclusive time by function', inclByFn);
  if (values['long-tasks']) longTasks(p, byId, parent, Number(values['long-tasks']) * 1000);
}

/**
 * Stretches of consecutive non-idle samples of at least `minUs`: when each started (ms into the
 * profile), how long it held the thread, and the functions (inclusive, src/ and packages first)
 * that took the most of it.
 */
function longTasks(p: Profile, byId: Map<number, ProfileNode>, parent: Map<number, number>, minUs: number): void {
  const idle = (id: number) => byId.get(id)!.callFrame.functionName === '(idle)';
  const tasks: Array<{ start: number; us: number; samples: number[] }> = [];
  let t = 0;
  let cur: { start: number; us: number; samples: number[] } | undefined;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i] ?? 0;
    const id = p.samples[i]!;
    const dt = p.timeDeltas[i + 1] ?? 0;
    if (idle(id)) {
      if (cur && cur.us >= minUs) tasks.push(cur);
      cur = undefined;
      continue;
    }
    cur ??= { start: t, us: 0, samples: [] };
    cur.us += dt;
    cur.samples.push(i);
  }
  if (cur && cur.us >= minUs) tasks.push(cur);
  console.log(`\nstretches without an idle sample of at least ${minUs / 1000} ms: ${tasks.length}`);
  for (const task of tasks) {
    const incl = new Map<string, number>();
    for (const i of task.samples) {
      const dt = p.timeDeltas[i + 1] ?? 0;
      const seen = new Set<string>();
      for (let c: number | undefined = p.samples[i]!; c !== undefined; c = parent.get(c)) {
        const k = fnKey(byId.get(c)!.callFrame);
        if (seen.has(k)) continue;
        seen.add(k);
        incl.set(k, (incl.get(k) ?? 0) + dt);
      }
    }
    const topFns = [...incl]
      .filter(([k]) => !k.startsWith('(root)') && !k.includes('processTicksAndRejections') && !k.startsWith('(anonymous)  node:'))
      .sort((a, b) => b[1] - a[1])
      .slice(0, 12);
    console.log(`  at ${(task.start / 1000).toFixed(0)} ms: ${(task.us / 1000).toFixed(1)} ms`);
    for (const [k, us] of topFns) console.log(`      ${(us / 1000).toFixed(1).padStart(6)} ms  ${k}`);
  }
}
