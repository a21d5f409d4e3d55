import { z } from 'zod';
import { CLAIM_ANY } from '../../domain/batch.ts';
import { AgentName, ClaimBody, Task } from '../schemas.ts';
import { Text } from './text.ts';

/** POST /v1/claim: one long-poll claim for several agents (src/engine/claim-any.ts). */
export const ClaimAnyBody = z.strictObject({
  agents: z
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
    .describe(`the agents to claim for, each with its own \`max\` (1 to ${CLAIM_ANY.maxAgents} agents, each once)`),
  worker_id: ClaimBody.shape.worker_id,
  wait_seconds: ClaimBody.shape.wait_seconds,
  claim_id: Text.min(1)
    .max(100)
    .optional()
    .describe('names this claim, so that POST /v1/claim/withdraw can end its wait (chosen by the client; unique among its claims)'),
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
