/**
 * One claiming process of the throttle-accuracy workload (bench/lib/flow.ts): opens the
 * PostgreSQL store from BATON_DATABASE_URL / BATON_PG_SCHEMA, runs `loops` claim loops on the
 * agent (long-poll, complete at once) until `tasks` tasks of the agent have finished, then exits.
 *   node --import tsx bench/lib/flow-claimer.ts <agent> <tasks> <loops> <name>
 */
import { Engine } from '../../src/engine/engine.ts';
import { openPostgres } from '../../src/store/postgres.ts';

const [agent, tasksArg, loopsArg, name] = process.argv.slice(2) as [string, string, string, string];
const tasks = Number(tasksArg);
const store = openPostgres({ url: process.env.BATON_DATABASE_URL!, schema: process.env.BATON_PG_SCHEMA!, poolMax: 4 });
const engine = new Engine({ store, nodeId: name });
const stop = new AbortController();

async function finished(): Promise<number> {
  const { n } = await store.db
    .selectFrom('executions')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('agent', '=', agent)
    .where('status', '=', 'succeeded')
    .executeTakeFirstOrThrow();
  return Number(n);
}

async function loop(k: number): Promise<void> {
  while (!stop.signal.aborted) {
    let rows;
    try {
      rows = await engine.claim(agent, { owner: `${name}-${k}`, max: 1, waitMs: 2000, signal: stop.signal });
    } catch (err) {
      if (stop.signal.aborted) return;
      throw err;
    }
    for (const r of rows) await engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, name);
  }
}

const loops = Array.from({ length: Number(loopsArg) }, (_, k) => loop(k));
const watch = setInterval(() => {
  finished().then(
    (n) => {
      if (n >= tasks) stop.abort();
    },
    () => {},
  );
}, 250);
try {
  await Promise.all(loops);
} finally {
  clearInterval(watch);
  engine.close();
  await store.close();
}
