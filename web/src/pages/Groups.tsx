import { useState } from 'react';
import { client, describe } from '../api.ts';
import { useLive, useLoad, useTick } from '../hooks.ts';
import { Empty, Failed, Loading, Section, Status, Time, link } from '../ui.tsx';

import type { Group } from '../../../src/client.ts';

/** Groups, newest first, a page at a time. */
export function GroupsPage() {
  useTick();
  const [cursors, setCursors] = useState<string[]>([]);
  const cursor = cursors.at(-1);
  const page = useLoad(() => client().listGroups({ limit: 25, cursor }), [cursor]);
  // A member or join changing status can change a group's progress: refetch (coalesced by useLive).
  useLive(() => true, page.reload, [page.reload]);
  return (
    <Section wide title="Groups">
      {page.error ? (
        <Failed what="groups" error={page.error} retry={page.reload} />
      ) : page.data === undefined ? (
        <Loading what="groups" />
      ) : page.data.groups.length === 0 ? (
        <Empty>
          No groups{cursor ? ' on this page' : ''}. Create one with <code>baton groups create -f spec.json</code> or{' '}
          <code>POST /v1/groups</code>.
        </Empty>
      ) : (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th>Group</th>
                <th>Status</th>
                <th>Policy</th>
                <th>Progress</th>
                <th>Join</th>
                <th>Created</th>
              </tr>
            </thead>
            <tbody>
              {page.data.groups.map((g) => (
                <tr key={g.id} data-group={g.id}>
                  <td>
                    <a className="mono" href={link('groups', g.id)}>
                      {g.id}
                    </a>
                  </td>
                  <td>
                    <Status status={g.status} />
                  </td>
                  <td>{policyText(g)}</td>
                  <td>
                    <Progress g={g} />
                  </td>
                  <td data-field="join">
                    <JoinState g={g} />
                  </td>
                  <td>
                    <Time iso={g.created_at} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <div className="pager">
        {cursors.length > 0 && (
          <button className="link" onClick={() => setCursors(cursors.slice(0, -1))}>
            ← newer
          </button>
        )}
        {page.data?.next_cursor && (
          <button className="link" onClick={() => setCursors([...cursors, page.data!.next_cursor!])}>
            older →
          </button>
        )}
      </div>
    </Section>
  );
}

/** One group as a tree: the group, its members in order, and the join that follows them. Live. */
export function GroupPage({ id }: { id: string }) {
  useTick(5_000);
  const g = useLoad(() => client().getGroup(id), [id]);
  const ids = new Set([...(g.data?.members.map((m) => m.execution_id) ?? []), g.data?.join?.execution_id]);
  // Members' retries have new ids: any change of a member agent's execution may be one of them.
  const agents = new Set([...(g.data?.members.map((m) => m.agent) ?? []), g.data?.join?.agent]);
  useLive((e) => ids.has(e.id) || agents.has(e.agent), g.reload, [id, g.reload, g.data]);
  if (g.error) return <Failed what={`group ${id}`} error={g.error} retry={g.reload} />;
  if (!g.data) return <Loading what={`group ${id}`} />;
  const x = g.data;
  return (
    <div className="grid">
      <Section wide title={`Group ${x.id}`} actions={<CancelGroup group={x} onDone={g.reload} />}>
        <dl className="facts">
          <dt>Status</dt>
          <dd>
            <Status status={x.status} />
          </dd>
          <dt>Policy</dt>
          <dd>{policyText(x)}</dd>
          <dt>Progress</dt>
          <dd>
            <Progress g={x} />
          </dd>
          <dt>Created</dt>
          <dd>
            <Time iso={x.created_at} /> <span className="muted">by {x.created_by}</span>
          </dd>
          <dt>Decided</dt>
          <dd>
            <Time iso={x.decided_at} />
          </dd>
        </dl>
        <ul className="tree" aria-label="group tree">
          <li>
            <span className="mono">{x.id}</span> <Status status={x.status} />
            <ul>
              {x.members.map((m) => (
                <li key={m.index} data-member={m.index}>
                  <span className="muted">#{m.index}</span> <a href={link('agents', m.agent)}>{m.agent}</a>{' '}
                  <a className="mono" href={link('executions', m.execution_id)}>
                    {m.execution_id}
                  </a>{' '}
                  <Status status={m.status} />
                  {m.retry_number > 0 && <span className="muted"> (retry {m.retry_number})</span>}
                  {m.error ? (
                    <span className="muted">
                      {' '}
                      — {m.error.code}: {m.error.message}
                    </span>
                  ) : m.result_preview ? (
                    <span className="muted"> — {m.result_preview}</span>
                  ) : null}
                </li>
              ))}
              <li data-join={x.join?.execution_id ?? x.join_refused ?? 'none'}>
                <strong>join</strong> <JoinState g={x} />
              </li>
            </ul>
          </li>
        </ul>
      </Section>
    </div>
  );
}

/** Where a group's join stands: none, its task (agent, execution, status), refused, or still to come. */
function JoinState({ g }: { g: Pick<Group, 'join' | 'join_refused' | 'status'> }) {
  if (g.join === null) return <span className="muted">none (no join spec)</span>;
  if (g.join.execution_id)
    return (
      <>
        <a href={link('agents', g.join.agent)}>{g.join.agent}</a>{' '}
        <a className="mono" href={link('executions', g.join.execution_id)}>
          {g.join.execution_id}
        </a>{' '}
        {g.join.status && <Status status={g.join.status} />}
      </>
    );
  if (g.join_refused) return <span className="status status-failed">refused: {g.join_refused}</span>;
  return (
    <span className="muted">
      on {g.join.agent}, when the group decides ({g.status === 'running' ? 'waiting' : 'not started'})
    </span>
  );
}

function policyText(g: Pick<Group, 'policy' | 'quorum'>): string {
  return g.policy === 'quorum' ? `quorum of ${g.quorum}` : g.policy;
}

function Progress({ g }: { g: Pick<Group, 'progress' | 'size'> }) {
  const { finished, succeeded, failed } = g.progress;
  return (
    <span>
      <progress max={g.size} value={finished} /> {finished}/{g.size} final{' '}
      <span className="muted">
        ({succeeded} succeeded, {failed} failed)
      </span>
    </span>
  );
}

function CancelGroup({ group, onDone }: { group: Group; onDone: () => void }) {
  const [busy, setBusy] = useState(false);
  const [msg, setMsg] = useState<string>();
  const settled = group.status !== 'running' && (!group.join?.execution_id || !['queued', 'running'].includes(group.join.status ?? ''));
  if (settled) return null;
  const cancel = async () => {
    setBusy(true);
    setMsg(undefined);
    try {
      const r = await client().cancelGroup(group.id);
      setMsg(r.changed ? 'Cancelled: its live members and join were cancelled.' : 'Nothing left to cancel.');
      onDone();
    } catch (err) {
      setMsg(`Not cancelled: ${describe(err)}`);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="cancel">
      <button className="danger" onClick={cancel} disabled={busy}>
        Cancel group
      </button>
      {msg && (
        <span className="small" role="status">
          {msg}
        </span>
      )}
    </div>
  );
}
