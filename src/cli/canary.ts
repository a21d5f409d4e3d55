import { Command, InvalidArgumentError } from 'commander';
import type { CanaryViolation } from '../client.ts';
import { VIOLATION_STATE_FILTERS } from '../domain/canary.ts';
import { connect, type ConnectionFlags } from './connection.ts';
import { relativeTime, table } from './output.ts';

/** `baton canary run` exits with this when anything is violated (0: all invariants hold). */
export const EXIT_VIOLATED = 1;

type Flags = ConnectionFlags & { json?: boolean } & Record<string, any>;
const print = (o: Flags, data: unknown, human: () => string) =>
  process.stdout.write((o.json ? JSON.stringify(data, null, 2) : human()) + '\n');
const violationRow = (v: CanaryViolation) => ({
  invariant: v.invariant,
  severity: v.severity,
  subject: v.subject,
  reason: v.reason,
  since: relativeTime(v.first_seen),
  seen: relativeTime(v.last_seen),
  resolved: v.resolved_at ? relativeTime(v.resolved_at) : '',
  diagnosis: v.diagnosis,
});
const COLS = ['invariant', 'severity', 'subject', 'reason', 'since', 'seen', 'resolved', 'diagnosis'];

/** `baton canary run | status | violations`. */
export function registerCanaryCommands(program: Command): void {
  const canary = program.command('canary').description('the built-in invariant checker');
  const flags = (cmd: Command) => cmd.optsWithGlobals() as Flags;

  canary
    .command('run')
    .description('run one canary cycle now; exits 1 when any invariant is violated')
    .option('--full', 'check all history (in bounded chunks), not only the activity since the last checkpoint')
    .action(async (_o, cmd) => {
      const o = flags(cmd);
      const c = connect(o);
      const r = await c.canaryRun({ full: Boolean(o.full) });
      const open = r.violated ? (await c.canaryViolations({ state: 'open', limit: 500 })).violations : [];
      print(o, { ...r, open_violations: open }, () => {
        const lines = r.checks.map(
          (k) =>
            `${k.id.padEnd(5)} ${k.status.padEnd(8)} ${k.status === 'skipped' ? k.skipped_reason : `${k.findings.length} finding(s)`}${k.notes?.length ? ` (${k.notes.join('; ')})` : ''}`,
        );
        if (r.events)
          lines.push(
            '',
            `${r.full ? 'full check: ' : ''}${r.events.read} event(s) read${r.events.caught_up ? '' : ' (more remain: the next cycle continues)'}`,
          );
        lines.push('', r.violated ? `VIOLATED: ${r.open} open violation(s)` : 'all invariants hold');
        if (open.length) lines.push('', table(open.map(violationRow), COLS));
        return lines.join('\n');
      });
      if (r.violated) process.exitCode = EXIT_VIOLATED;
    });

  canary
    .command('status')
    .description('disabled | healthy | violated | stale, with the open violations')
    .action(async (_o, cmd) => {
      const o = flags(cmd);
      const s = await connect(o).canaryStatus();
      print(o, s, () =>
        [
          `status      ${s.status}`,
          `last cycle  ${s.last_completed_at ? relativeTime(s.last_completed_at) : 'never'} (${s.interval_ms > 0 ? `every ${s.interval_ms / 1000}s` : 'its timer off in the server asked'}${s.lease_owner ? `, run by ${s.lease_owner}` : ''})`,
          `checkpoint  ${s.checkpoint.event_id === null ? 'none (no cycle yet)' : `event ${s.checkpoint.event_id} of ${s.checkpoint.latest_event_id ?? 0}`}`,
          `alerts      ${s.alerts.pending} pending, ${s.alerts.delivered} delivered, ${s.alerts.failed} undeliverable`,
          '',
          s.open.length ? table(s.open.map(violationRow), COLS) : 'no open violations',
        ].join('\n'),
      );
    });

  canary
    .command('violations')
    .description('violation history (default: open)')
    .option('--invariant <id>', 'e.g. E-01')
    .option('--state <state>', 'open | resolved | all', (v) => {
      if (!(VIOLATION_STATE_FILTERS as readonly string[]).includes(v))
        throw new InvalidArgumentError('--state must be open, resolved or all');
      return v;
    })
    .option('--agent <name>')
    .option('--limit <n>', 'rows (default 50)', (v) => Number(v))
    .action(async (_o, cmd) => {
      const o = flags(cmd);
      const page = await connect(o).canaryViolations({ invariant: o.invariant, state: o.state, agent: o.agent, limit: o.limit });
      print(o, page, () => (page.violations.length ? table(page.violations.map(violationRow), COLS) : 'no violations'));
    });
}
