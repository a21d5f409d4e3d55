import { readFileSync } from 'node:fs';
import { InvalidArgumentError, type Command } from 'commander';
import { ApiError, groupSettled, type Group, type GroupCreate } from '../client.ts';
import { int } from './args.ts';
import { EXIT } from './exit.ts';
import { keyValues, table } from './output.ts';
import type { CliHelpers } from './globals.ts';

const groupSummary = (g: Group) => ({
  id: g.id,
  policy: g.policy === 'quorum' ? `quorum ${g.quorum}` : g.policy,
  status: g.status,
  progress: `${g.progress.finished}/${g.size} finished, ${g.progress.succeeded} succeeded, ${g.progress.failed} failed`,
  join: g.join ? `${g.join.agent} ${g.join.execution_id ?? '-'} ${g.join.status ?? ''}`.trim() : '-',
  join_refused: g.join_refused ?? '-',
  created: g.created_at,
  decided: g.decided_at ?? '-',
});

/** A group as a tree: its members, then its join. */
function showGroup(g: Group): string {
  const members = table(
    g.members.map((m) => ({
      index: m.index,
      agent: m.agent,
      execution: m.execution_id,
      status: m.status,
      retry: m.retry_number,
      error: m.error ? `${m.error.code ?? ''} ${m.error.message ?? ''}`.trim() : '',
    })),
    ['index', 'agent', 'execution', 'status', 'retry', 'error'],
  );
  return `${keyValues(groupSummary(g))}\n\nmembers\n${members}`;
}

/** Exit code of a settled group: its join's outcome when it ran one, else the group's status. */
function exitForGroup(g: Group): number {
  const status = g.join?.status ?? g.status;
  if (status === 'failed') return EXIT.executionFailed;
  if (status === 'cancelled') return EXIT.executionCancelled;
  return EXIT.ok;
}

function readSpec(path: string): GroupCreate {
  let text: string;
  try {
    text = path === '-' ? readFileSync(0, 'utf8') : readFileSync(path, 'utf8');
  } catch (err) {
    throw new InvalidArgumentError(`-f ${path}: ${(err as Error).message}`);
  }
  try {
    return JSON.parse(text) as GroupCreate;
  } catch (err) {
    throw new InvalidArgumentError(`-f ${path}: not JSON (${(err as Error).message})`);
  }
}

/** `baton groups …`: fan-out with a join (docs/cli.md). */
export function registerGroupCommands(program: Command, h: CliHelpers): void {
  const groups = program.command('groups').description('fan-out with a join: a group of tasks and the task that joins them');

  groups
    .command('create')
    .description(
      'create a group from a JSON spec: {"members":[{"agent","message","payload"?}],"policy"?,"quorum"?,"join"?:{"agent","message"}}',
    )
    .requiredOption('-f, --file <path>', "the group's JSON spec ('-': stdin)")
    .option('--idempotency-key <key>', 'the same key again returns the same group')
    .option('--wait', 'wait until the group decides and its join ends; exit code as `run --wait`')
    .option('--timeout <seconds>', 'with --wait: give up after this long', int('--timeout'))
    .action(async (_o, cmd) => {
      const o = h.opts(cmd);
      const c = h.client(o);
      let created;
      try {
        created = await c.createGroup(readSpec(o.file), { idempotencyKey: o.idempotencyKey });
      } catch (err) {
        // Every refused item, not just the first: the spec can be fixed in one go.
        if (err instanceof ApiError && err.code === 'group_refused' && !o.json) {
          for (const i of (err.body.items as Array<{ index: number | string; error: string; message: string }>) ?? []) {
            process.stderr.write(`  ${i.index === 'join' ? 'join' : `member ${i.index}`}: ${i.error}: ${i.message}\n`);
          }
        }
        throw err;
      }
      if (!o.wait) {
        h.print(o, created, () => {
          const paused = created.paused_agents.length ? `\npaused agents (their members wait): ${created.paused_agents.join(', ')}` : '';
          return `created group ${created.id} (${created.size} members)${paused}`;
        });
        return;
      }
      const g = await c.waitForGroup(created.id, { timeoutMs: o.timeout === undefined ? undefined : o.timeout * 1000 });
      h.print(o, g, () => showGroup(g));
      if (!groupSettled(g)) {
        process.stderr.write(`group ${g.id} still ${g.status}${g.join?.status ? ` (join ${g.join.status})` : ''} after ${o.timeout}s\n`);
        process.exitCode = EXIT.error;
        return;
      }
      process.exitCode = exitForGroup(g);
    });

  groups
    .command('show <id>')
    .description('a group: status, progress, each member and the join')
    .action(async (id, _o, cmd) => {
      const o = h.opts(cmd);
      const g = await h.client(o).getGroup(id);
      h.print(o, g, () => showGroup(g));
    });

  groups
    .command('list')
    .description('groups, newest first')
    .option('--limit <n>', 'page size (default 50, at most 200)', int('--limit'))
    .option('--cursor <cursor>', 'next_cursor of the previous page')
    .action(async (_o, cmd) => {
      const o = h.opts(cmd);
      const page = await h.client(o).listGroups({ limit: o.limit, cursor: o.cursor });
      h.print(o, page, () => {
        const rows = page.groups.map((g) => ({
          id: g.id,
          policy: g.policy === 'quorum' ? `quorum ${g.quorum}` : g.policy,
          status: g.status,
          progress: `${g.progress.finished}/${g.size}`,
          join: g.join ? (g.join.execution_id ?? g.join_refused ?? 'pending') : '-',
          created: g.created_at,
        }));
        const more = page.next_cursor ? `\nmore: --cursor ${page.next_cursor}` : '';
        return rows.length === 0 ? 'no groups' : table(rows, ['id', 'policy', 'status', 'progress', 'join', 'created']) + more;
      });
    });

  groups
    .command('cancel <id>')
    .description('cancel a group: no join; members not ended (and a started join) are cancelled')
    .action(async (id, _o, cmd) => {
      const o = h.opts(cmd);
      const r = await h.client(o).cancelGroup(id);
      h.print(o, r, () => `${r.changed ? 'cancelled' : 'already decided:'} group ${id} (${r.group.status})`);
    });
}
