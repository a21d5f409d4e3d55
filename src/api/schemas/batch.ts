/**
 * Fewer round trips: the batch submit, a completion that claims the next tasks in the same
 * request, and the batch of completions.
 */
import { z } from 'zod';
import { BATCH, COMPLETION, IDEMPOTENCY_KEY_PATTERN } from '../../domain/batch.ts';
import { CONTRACT_DEFAULTS as DEFAULTS } from '../../domain/defaults.ts';
import { ClaimBody, CompleteBody, Execution, ExecutionParams, ExecutionStatus, SubmitBody, Task } from '../schemas.ts';

// A batch item takes a concurrency key (caps, throttle and fairness apply per key, as to a single
// submit), but not debounce or singleton: their answer (a task folded, a refusal naming the live
// task) depends on the tasks the same batch creates before it, and a batch answers per item only
// with created / replayed / refused. Sent, they are a 400 naming the field (submit them alone).
export const BatchItem = SubmitBody.omit({ debounce_seconds: true, singleton: true }).extend({
  idempotency_key: z
    .string()
    .regex(IDEMPOTENCY_KEY_PATTERN, 'must be 1-255 visible ASCII characters')
    .optional()
    .describe(
      "scoped to the agent, like a single submit's Idempotency-Key header (the two share keys): used again with the same item, it answers with the first execution (replayed: true)",
    ),
});
export type BatchItem = z.infer<typeof BatchItem>;

export const SubmitBatchBody = z.strictObject({
  items: z
    .array(BatchItem)
    .min(1)
    .max(BATCH.maxItems)
    .describe(`the tasks, in order (1 to ${BATCH.maxItems}; the whole body at most ${BATCH.bodyLimitBytes / 1024 / 1024} MiB)`),
});
export type SubmitBatchBody = z.input<typeof SubmitBatchBody>;

export const BatchItemAnswer = z.union([
  z.object({
    index: z.number().int().describe('position in body.items'),
    execution_id: z.string(),
    status: ExecutionStatus.describe('queued when created; a replay: the status its first answer gave'),
    replayed: z.boolean().optional().describe('true: its idempotency key was used before; this is the execution it created then'),
  }),
  z.object({
    index: z.number().int(),
    error: z
      .string()
      .describe('backlog_full (no room left: later items too), idempotency_key_reused, idempotency_in_flight; or a replayed refusal'),
    message: z.string(),
    replayed: z.boolean().optional(),
  }),
]);
export type BatchItemAnswer = z.infer<typeof BatchItemAnswer>;

export const SubmitBatchAnswer = z.object({
  agent: z.string(),
  agent_paused: z.boolean().describe('true: the agent is paused; created work is queued and waits for a resume'),
  created: z.number().int().describe('items created by this request'),
  replayed: z.number().int().describe('items answered from an idempotency key used before'),
  refused: z.number().int(),
  items: z.array(BatchItemAnswer).describe('one answer per item, in the order of body.items'),
});
export type SubmitBatchAnswer = z.infer<typeof SubmitBatchAnswer>;

/** What a completion may also ask for: the agent's next tasks, leased to this worker. */
export const ClaimAfter = ClaimBody.extend({
  wait_seconds: z
    .number()
    .min(0)
    .max(DEFAULTS.claimWaitMaxMs / 1000)
    .optional()
    .describe('how long to wait for a task after the completion (default 0: answer at once)'),
}).describe("claim the execution's agent's next tasks in the same request, as POST /v1/agents/{agent}/claim would");

export const CompleteAndClaimBody = CompleteBody.extend({ claim: ClaimAfter.optional() });
export type CompleteAndClaimBody = z.input<typeof CompleteAndClaimBody>;

export const Completed = Execution.extend({
  tasks: z
    .array(Task)
    .optional()
    .describe('only when `claim` was asked: the tasks claimed after the completion committed (empty: none came in time)'),
  claim_error: z
    .object({ error: z.string(), message: z.string() })
    .optional()
    .describe('the claim failed (the completion stands): claim again with POST /v1/agents/{agent}/claim'),
});
export type Completed = z.infer<typeof Completed>;

export const CompletionsBody = z.strictObject({
  completions: z
    .array(
      CompleteAndClaimBody.extend({
        execution_id: ExecutionParams.shape.id.describe('the execution this item completes'),
        // One answer for every item: a claim that waited would hold the other items' answers back.
        claim: ClaimAfter.extend({
          wait_seconds: z
            .literal(0)
            .optional()
            .describe('0 (the default): a batch answers once every item is decided, so its claims do not wait'),
        }).optional(),
      }),
    )
    .min(1)
    .max(COMPLETION.batchMaxItems)
    .describe(
      `the completions (1 to ${COMPLETION.batchMaxItems}), each what POST /v1/executions/{id}/complete takes plus its execution_id; the whole body at most ${COMPLETION.batchBodyLimitBytes / 1024 / 1024} MiB, each item at most ${COMPLETION.bodyLimitBytes / 1024 / 1024} MiB`,
    ),
});
export type CompletionsBody = z.input<typeof CompletionsBody>;

export const CompletionAnswer = z.union([
  z.object({
    index: z.number().int().describe('position in body.completions'),
    http_status: z.literal(200),
    completed: Completed.describe("the single route's 200 answer"),
  }),
  z
    .object({
      index: z.number().int(),
      http_status: z.number().int().describe('the status the single route would have answered: 404 not_found, 409 lease_lost, …'),
      error: z.string(),
      message: z.string(),
    })
    .loose(),
]);
export type CompletionAnswer = z.infer<typeof CompletionAnswer>;

export const CompletionsAnswer = z.object({
  items: z.array(CompletionAnswer).describe('one answer per completion, in the order of body.completions'),
});
export type CompletionsAnswer = z.infer<typeof CompletionsAnswer>;
