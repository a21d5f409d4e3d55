import { z } from 'zod';
import { CLAIM_ANY } from '../../domain/batch.ts';
import { AgentName, ClaimBody, Task } from '../schemas.ts';
import { Text } from './text.ts';

const ClaimAnyAgents = (what: string) =>
  z
    .array(
      z.strictObject({
        agent: AgentName,
        max: ClaimBody.shape.max.describe(`most tasks of this agent to take (default 1; at most ${CLAIM_ANY.maxPerAgent})`),
      }),
    )
    .min(1)
    .max(CLAIM_ANY.maxAgents)
    .superRefine((items, ctx) => {
      const seen = new Set<string>();
      for (const [i, { agent }] of items.entries()) {
        if (seen.has(agent)) ctx.addIssue({ code: 'custom', path: [i, 'agent'], message: `'${agent}' is named twice` });
        seen.add(agent);
      }
    })
    .describe(`${what}, each with its own \`max\` (1 to ${CLAIM_ANY.maxAgents} agents, each once)`);

/** POST /v1/claim: one long-poll claim for several agents (src/engine/claim-any.ts). */
export const ClaimAnyBody = z.strictObject({
  agents: ClaimAnyAgents('the agents to claim for'),
  worker_id: ClaimBody.shape.worker_id,
  wait_seconds: ClaimBody.shape.wait_seconds,
  claim_id: Text.min(1)
    .max(100)
    .optional()
    .describe(
      'names this claim, so that POST /v1/claim/widen can add agents to it and POST /v1/claim/withdraw can end its wait (chosen by the client; unique among its claims)',
    ),
});
export type ClaimAnyBody = z.input<typeof ClaimAnyBody>;
export const ClaimAnyResponse = z.object({ tasks: z.array(Task).describe("tasks of any of the agents, each within its agent's `max`") });

export const ClaimWithdrawBody = z.strictObject({ claim_id: Text.min(1).max(100).describe('the `claim_id` the claim was made with') });
export type ClaimWithdrawBody = z.input<typeof ClaimWithdrawBody>;
export const ClaimWithdrawn = z.object({
  withdrawn: z
    .boolean()
    .describe(
      'true: a waiting claim of this key with that id was told to end; it answers as its wait would have ended (with any tasks it took). false: none was waiting in the server process that answered; the withdrawal was passed on to the other processes of the same database, and ends such a claim if one waits there',
    ),
});

export const ClaimWidenBody = z.strictObject({
  claim_id: Text.min(1).max(100).describe('the `claim_id` the claim was made with'),
  agents: ClaimAnyAgents('the agents to add to the claim, none of them in it already'),
});
export type ClaimWidenBody = z.input<typeof ClaimWidenBody>;
export const ClaimWidened = z.object({
  widened: z
    .boolean()
    .describe(
      `true: a waiting claim of this key with that id, in the server process that answered, now asks for these agents too, each within its \`max\`, and may answer with their tasks. false: it did not take, and the claim's answer has none of their tasks: no such claim waits in that process (it is answering, it ended, it waits in another process of the same database, or this widening overtook it), one of the agents is in it already, or they would take it over ${CLAIM_ANY.maxAgents} agents`,
    ),
});
