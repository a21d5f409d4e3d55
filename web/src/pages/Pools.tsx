/** Pools: limits several agents draw from (docs/concepts.md, "Pools"): the list, and one pool with its agents. */
import { client, type Agent, type PoolUsage } from '../api.ts';
import { throttleWords } from '../flow.tsx';
import { useLive, useLoad, useTick } from '../hooks.ts';
import { Empty, Failed, Loading, Section, Time, link } from '../ui.tsx';

/** Pools whose usage the list reads (one request each); past it, `baton pools list` has them all. */
const POOLS_READ = 100;

/** Pools are configuration, few: the list reads each one's usage. */
async function poolsWithUsage(): Promise<{ pools: PoolUsage[]; more: number }> {
  const c = client();
  const all = await c.listPools();
  return { pools: await Promise.all(all.slice(0, POOLS_READ).map((p) => c.getPool(p.name))), more: Math.max(0, all.length - POOLS_READ) };
}

function Seats({ pool: p }: { pool: PoolUsage }) {
  return (
    <>
      {p.in_use} / {p.max_parallel ?? '∞'}
    </>
  );
}

function ThrottleState({ pool: p }: { pool: PoolUsage }) {
  if (!p.throttle) return <>none</>;
  return (
    <>
      {throttleWords(p.throttle)}
      {p.throttle_next_admit_at && Date.parse(p.throttle_next_admit_at) > Date.now() ? (
        <>
          {' '}
          · <strong>closed</strong>, next start <Time iso={p.throttle_next_admit_at} />
        </>
      ) : (
        ' · open'
      )}
    </>
  );
}

function BudgetUsage({ pool: p }: { pool: PoolUsage }) {
  if (p.budget_limits.length === 0) return <>none</>;
  return (
    <>
      {p.budget_limits.map((l) => (
        <span key={`${l.metric}/${l.window}`} className={l.remaining <= 0 ? 'warn' : undefined}>
          {l.metric} {l.spent} / {l.limit} per {l.window} (resets <Time iso={l.resets_at} />){' '}
        </span>
      ))}
    </>
  );
}

export function PoolsPage() {
  useTick();
  const pools = useLoad(poolsWithUsage, []);
  const agents = new Set(pools.data?.pools.flatMap((p) => p.agents) ?? []);
  useLive((e) => agents.has(e.agent), pools.reload, [pools.data]);
  return (
    <Section wide title="Pools">
      {pools.error ? (
        <Failed what="pools" error={pools.error} retry={pools.reload} />
      ) : !pools.data ? (
        <Loading what="pools" />
      ) : pools.data.pools.length === 0 ? (
        <Empty>
          No pools yet. Create one with <code>baton pools create</code>, then list it in an agent&rsquo;s pools.
        </Empty>
      ) : (
        <table className="pools">
          <thead>
            <tr>
              <th>pool</th>
              <th>seats in use / cap</th>
              <th>throttle</th>
              <th>budget</th>
              <th>agents</th>
            </tr>
          </thead>
          <tbody>
            {pools.data.pools.map((p) => (
              <tr key={p.name} data-pool={p.name}>
                <td>
                  <a href={link('pools', p.name)}>{p.name}</a>
                </td>
                <td data-field="pool-seats">
                  <Seats pool={p} />
                </td>
                <td data-field="pool-throttle">
                  <ThrottleState pool={p} />
                </td>
                <td data-field="pool-budget">
                  <BudgetUsage pool={p} />
                </td>
                <td>{p.agents.length}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {pools.data && pools.data.more > 0 && (
        <p className="muted small">
          {pools.data.more} more pools; <code>baton pools list</code> lists them all.
        </p>
      )}
    </Section>
  );
}

/** Agents shown with their seats on a pool page; the rest are listed by name. */
const AGENTS_READ = 50;

async function poolPage(name: string): Promise<{ pool: PoolUsage; agents: Agent[] }> {
  const c = client();
  const pool = await c.getPool(name);
  const agents = await Promise.all(pool.agents.slice(0, AGENTS_READ).map((a) => c.getAgent(a)));
  return { pool, agents };
}

export function PoolPage({ name }: { name: string }) {
  useTick();
  const page = useLoad(() => poolPage(name), [name]);
  const agents = new Set(page.data?.pool.agents ?? []);
  useLive((e) => agents.has(e.agent), page.reload, [name, page.data]);
  if (page.error) return <Failed what={`pool ${name}`} error={page.error} retry={page.reload} />;
  if (!page.data) return <Loading what={`pool ${name}`} />;
  const { pool: p } = page.data;
  return (
    <div className="grid">
      <Section title={`Pool ${p.name}`}>
        <dl className="facts">
          <dt>Seats in use / cap</dt>
          <dd data-field="pool-seats">
            <Seats pool={p} />
          </dd>
          <dt>Throttle</dt>
          <dd data-field="pool-throttle">
            <ThrottleState pool={p} />
          </dd>
          <dt>Budget</dt>
          <dd data-field="pool-budget">
            <BudgetUsage pool={p} />
          </dd>
          <dt>Created</dt>
          <dd>
            <Time iso={p.created_at} />
          </dd>
          {p.description && (
            <>
              <dt>Description</dt>
              <dd>{p.description}</dd>
            </>
          )}
        </dl>
      </Section>
      <Section title="Agents drawing from it">
        {p.agents.length === 0 ? (
          <Empty>No agent draws from {p.name}.</Empty>
        ) : (
          <table className="pool-agents">
            <thead>
              <tr>
                <th>agent</th>
                <th>running / cap</th>
                <th>queued</th>
              </tr>
            </thead>
            <tbody>
              {page.data.agents.map((a) => (
                <tr key={a.name} data-agent={a.name}>
                  <td>
                    <a href={link('agents', a.name)}>{a.name}</a>
                  </td>
                  <td>
                    {a.running} / {a.max_parallel}
                  </td>
                  <td>{a.queued}</td>
                </tr>
              ))}
              {p.agents.slice(AGENTS_READ).map((n) => (
                <tr key={n} data-agent={n}>
                  <td>
                    <a href={link('agents', n)}>{n}</a>
                  </td>
                  <td className="muted">—</td>
                  <td className="muted">—</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Section>
    </div>
  );
}
