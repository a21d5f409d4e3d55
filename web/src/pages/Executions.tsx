import { EXECUTION_STATES } from '../../../src/domain/states.ts';
import type { ExecutionListItem } from '../api.ts';
import { client } from '../api.ts';
import { useLive, useLoad, useTick } from '../hooks.ts';
import { duration, Empty, Failed, Loading, Section, Status, Time, link } from '../ui.tsx';

export function ExecutionTable({ rows }: { rows: ExecutionListItem[] }) {
  return (
    <div className="table-wrap">
      <table className="executions">
        <thead>
          <tr>
            <th>Execution</th>
            <th>Agent</th>
            <th>Status</th>
            <th>Trigger</th>
            <th>Attempt</th>
            <th>Created</th>
            <th>Duration</th>
            <th>Error</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((e) => (
            <tr key={e.id} data-execution={e.id}>
              <td className="mono">
                <a href={link('executions', e.id)}>{e.id}</a>
              </td>
              <td>{e.agent}</td>
              <td>
                <Status status={e.status} />
              </td>
              <td>{e.trigger}</td>
              <td>{e.attempt}</td>
              <td>
                <Time iso={e.created_at} />
              </td>
              <td>{duration(e.duration_ms)}</td>
              <td className="err">{e.error?.code ?? ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

export function ExecutionsPage({ query }: { query: URLSearchParams }) {
  useTick();
  const agent = query.get('agent') ?? '';
  const status = query.get('status') ?? '';
  const agents = useLoad(() => client().listAgents(), []);
  const page = useLoad(
    () => client().listExecutions({ agent: agent || undefined, status: status || undefined, limit: 100 }),
    [agent, status],
  );
  useLive((e) => !agent || e.agent === agent, page.reload, [agent, page.reload]);
  const setFilter = (k: string, v: string) => {
    const q = new URLSearchParams(query);
    if (v) q.set(k, v);
    else q.delete(k);
    location.hash = `#/executions${q.size ? '?' + q : ''}`;
  };
  return (
    <Section
      title="Executions"
      actions={
        <div className="filters">
          <label>
            Agent{' '}
            <select name="agent" value={agent} onChange={(e) => setFilter('agent', e.target.value)}>
              <option value="">all</option>
              {agents.data?.map((a) => (
                <option key={a.name} value={a.name}>
                  {a.name}
                </option>
              ))}
            </select>
          </label>
          <label>
            Status{' '}
            <select name="status" value={status} onChange={(e) => setFilter('status', e.target.value)}>
              <option value="">all</option>
              {EXECUTION_STATES.map((s) => (
                <option key={s} value={s}>
                  {s}
                </option>
              ))}
            </select>
          </label>
        </div>
      }
    >
      {page.error ? (
        <Failed what="executions" error={page.error} retry={page.reload} />
      ) : !page.data ? (
        <Loading what="executions" />
      ) : page.data.executions.length === 0 ? (
        <Empty>No executions{agent || status ? ' match these filters' : ' yet'}. This list updates live.</Empty>
      ) : (
        <ExecutionTable rows={page.data.executions} />
      )}
    </Section>
  );
}
