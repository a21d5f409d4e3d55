/**
 * One claiming process of the throttle workload (bench/lib/flow-throttle.ts): opens the
 * PostgreSQL store from BATON_DATABASE_URL / BATON_PG_SCHEMA, runs `loops` claim loops on the
 * agent (long-poll, complete at once) until `tasks` tasks of the agent have finished, writes the
 * loops' trace (bench/lib/claim-trace.ts) and its clock's offset to the database's to `trace-file`
 * as JSON, then exits.
 *   node --import tsx bench/lib/flow-claimer.ts <agent> <tasks> <loops> <name> <trace-file>
 */
import { writeFileSync } from 'node:fs';
import { Engine } from '../../src/engine/engine.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import type { TraceRecord } from './claim-trace.ts';
import { claimUntilDone } from './flow-throttle.ts';

const [agent, tasks, loops, name, traceFile] = process.argv.slice(2) as [string, string, string, string, string];
const store = openPostgres({ url: process.env.BATON_DATABASE_URL!, schema: process.env.BATON_PG_SCHEMA!, poolMax: 4 });
const engine = new Engine({ store, nodeId: name });
const trace: TraceRecord[] = [];
try {
  await claimUntilDone(engine, store, { agent, tasks: Number(tasks), loops: Number(loops), name, trace });
  // With the bound on this process's offset to the database clock, which every time above is on.
  writeFileSync(traceFile, JSON.stringify({ trace, clock: store.clockSkew() }));
} finally {
  engine.close();
  await store.close();
}
