import { sql, type RawBuilder } from 'kysely';
import type { Tx } from '../../store/adapter.ts';
import { forScope, statuses } from '../sql.ts';
import { touchedRows } from '../touched.ts';
import { idChunks, RecentlySeen, type ActivityInvariant, type CheckContext, type Finding } from '../types.ts';

const zero = () => 0;

interface GroupRow {
  id: string;
  status: string;
  size: number;
  join_spec: string | null;
  join_execution_id: string | null;
  join_refused: string | null;
}

/**
 * The groups a cycle has judged already: a group's members are spread over many events and
 * chunks, and its running groups are judged again by the live part. Keyed by the check's
 * context, which lives for one cycle.
 */
const judgedThisCycle = new WeakMap<CheckContext, RecentlySeen>();

const RUNNING = sql.lit('running') as RawBuilder<'running'>;
const LIVE = ['queued', 'running'] as const;

/**
 * Judge groups as they are now. Each read is a seek: the group rows by primary key, their joins
 * (`group_index IS NULL`) through executions_group, their live members through the partial index
 * executions_group_open (queued and running rows only). Only a running group with no live
 * member — a broken group — has its members' positions counted.
 */
async function judgeGroups(tx: Tx, ids: Iterable<string>, ctx: CheckContext): Promise<Finding[]> {
  let seen = judgedThisCycle.get(ctx);
  if (!seen) judgedThisCycle.set(ctx, (seen = new RecentlySeen()));
  const fresh = seen.fresh(ids);
  const out: Finding[] = [];
  for (const part of idChunks(fresh)) {
    const groups: GroupRow[] = (
      await tx
        .selectFrom('execution_groups')
        .select(['id', 'status', 'size', 'join_spec', 'join_execution_id', 'join_refused'])
        .where('id', 'in', part)
        .execute()
    ).map((g) => ({ ...g, size: Number(g.size) }));
    if (groups.length === 0) continue;
    const gids = groups.map((g) => g.id);
    const joins = new Map<string, string[]>();
    const joinRows = await tx
      .selectFrom('executions')
      .select(['id', 'group_id'])
      .where('group_id', 'in', gids)
      .where('group_index', 'is', null)
      .where('retry_number', '=', 0)
      .execute();
    for (const j of joinRows) joins.set(j.group_id!, [...(joins.get(j.group_id!) ?? []), j.id]);
    const running = groups.filter((g) => g.status === 'running').map((g) => g.id);
    const live = new Set<string>();
    if (running.length) {
      const rows = await tx
        .selectFrom('executions')
        .select('group_id')
        .distinct()
        .where('group_id', 'in', running)
        .where('status', 'in', statuses(LIVE))
        .execute();
      for (const r of rows) live.add(r.group_id!);
    }
    for (const g of groups) {
      const f = (reason: string, detail?: Finding['detail']) => out.push({ subject: g.id, agent: null, reason, detail });
      const js = joins.get(g.id) ?? [];
      if (js.length > 1) f('join_duplicated', { joins: js.length });
      else if (g.status === 'running') {
        if (js.length === 1) f('join_while_running', { join_execution_id: js[0]! });
        else if (!live.has(g.id)) {
          const members = await tx
            .selectFrom('executions')
            .select((eb) => eb.fn.count<number>('group_index').distinct().as('n'))
            .where('group_id', '=', g.id)
            .where('group_index', 'is not', null)
            .executeTakeFirst();
          const n = Number(members?.n ?? 0);
          if (n >= g.size) f('undecided', { size: g.size });
          else f('members_missing', { size: g.size, members: n });
        }
      } else if (g.join_spec === null) {
        if (js.length === 1) f('join_without_spec', { status: g.status, join_execution_id: js[0]! });
      } else if (g.join_refused === null) {
        if (js.length === 0 && g.join_execution_id === null) f('join_missing', { status: g.status });
        else if (js.length === 1 && js[0] !== g.join_execution_id)
          f('join_mismatch', { join_execution_id: g.join_execution_id, found: js[0]! });
        // No join row while join_execution_id is set: the pruner took the join. It ends after the
        // decision, and the group row goes no later than it (retention/prune.ts).
      }
    }
  }
  return out;
}

/**
 * C-01: a group's join exists exactly once, when and only when its policy decided. A member's
 * final outcome, the group's decision and its join commit in one transaction (followFinals), so
 * the check is tier A. Activity: the groups of the executions touched since the checkpoint (a
 * member's final event, a join's creation). Live: every running group each cycle, read through
 * execution_groups_open; a running group always has a live member (a failed member's retry is
 * created with its failure), so "no live member" is the last completion that decided nothing.
 */
export const C01: ActivityInvariant = {
  kind: 'activity',
  id: 'C-01',
  tier: 'A',
  severity: 'critical',
  holds:
    'every group whose members are all final is decided; a decided group with a join spec has exactly one join (the one it names) or a recorded refusal; no group has a join while running',
  diagnoses: {
    undecided:
      'every member of a running group is final, yet the group was not decided: the compare-and-set on the group row missed the last member (engine/composition/groups.ts memberFinal, or a transition that ends executions without followFinals)',
    members_missing:
      'a running group has no live member and fewer members than its size: group creation did not write every member (engine/composition/groups.ts), so the group can never decide',
    join_duplicated:
      'a group has more than one join task: the decision was not exactly once (the compare-and-set on execution_groups, engine/composition/groups.ts)',
    join_while_running:
      'a group has a join task while it is still running: the join was created without the decision (engine/composition/groups.ts)',
    join_missing:
      'a decided group with a join spec has no join and no recorded refusal: the decision committed without creating or refusing its join (engine/composition/groups.ts)',
    join_mismatch: 'the join task of a decided group is not the one the group row names (engine/composition/groups.ts)',
    join_without_spec: 'a group without a join spec has a join task: something created a join it was never asked for',
  },
  grace: zero,
  // A full check walks the executions by id range rather than judging each one an event names.
  fullWalksRows: true,
  rows: (tx, scope, ctx) =>
    forScope(scope, async (part) => {
      const rows = await touchedRows(tx, part, ctx);
      return judgeGroups(
        tx,
        rows.flatMap((r) => (r.group_id === null ? [] : [r.group_id])),
        ctx,
      );
    }),
  async live(tx, ctx) {
    const running = await tx.selectFrom('execution_groups').select('id').where('status', '=', RUNNING).execute();
    return judgeGroups(
      tx,
      running.map((g) => g.id),
      ctx,
    );
  },
  /** Subjects are group ids: judge those groups again. */
  recheck: (tx, open, ctx) =>
    judgeGroups(
      tx,
      open.map((v) => v.subject),
      ctx,
    ),
};
