/**
 * MCP tools for subscriptions (chains): an agent's outcome starts a task on another
 * (docs/mcp.md, "Subscriptions").
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import type { BatonClient } from '../client.ts';
import { AgentName } from '../api/schemas.ts';
import { Subscription, SubscriptionCreate, SubscriptionListItem } from '../api/schemas/composition.ts';
import { asFailure, ok } from './answers.ts';

const subscriptionText = (s: Omit<z.infer<typeof Subscription>, 'payload'>) =>
  `${s.id}: when ${s.source_agent} ends ${s.on}${s.filter.schedule_id ? ` (schedule ${s.filter.schedule_id})` : ''}${s.filter.trigger ? ` (trigger ${s.filter.trigger})` : ''}, start a task on ${s.target_agent}${s.enabled ? '' : ' [disabled]'}`;

export function registerSubscriptionTools(server: McpServer, client: BatonClient): void {
  server.registerTool(
    'subscribe',
    {
      title: "Subscribe an agent to another's outcomes",
      description:
        'When an execution of source_agent reaches a final status that `on` names (succeeded, failed after its retries, cancelled, or any), start a task on target_agent in the same transaction, exactly once. The message and payload are templates over the source: {{source.id}}, {{source.status}}, {{source.result#/json/pointer}}, {{source.error.message}}, {{source.payload}}. Chains deeper than the server limit (default 10) start nothing and are recorded on the source.',
      inputSchema: SubscriptionCreate.shape,
      outputSchema: { subscription: Subscription, message: z.string() },
    },
    async (input) => {
      try {
        const s = await client.createSubscription(input);
        return ok({ subscription: s, message: `subscribed ${subscriptionText(s)}` });
      } catch (err) {
        return asFailure(err);
      }
    },
  );
  server.registerTool(
    'list_subscriptions',
    {
      title: 'List subscriptions',
      description:
        'Subscriptions (chains), oldest first: every one, or those where `agent` is the source or the target. Message templates are previews; payload templates are shown as `payload_preview`.',
      inputSchema: { agent: AgentName.optional().describe('only those where this agent is the source or the target') },
      outputSchema: { subscriptions: z.array(SubscriptionListItem) },
      annotations: { readOnlyHint: true },
    },
    async ({ agent }) => {
      try {
        const subscriptions = await client.listSubscriptions(agent);
        return ok({ subscriptions }, subscriptions.length ? subscriptions.map(subscriptionText).join('\n') : 'no subscriptions');
      } catch (err) {
        return asFailure(err);
      }
    },
  );
  server.registerTool(
    'unsubscribe',
    {
      title: 'Delete a subscription',
      description: 'Delete a subscription: later outcomes start nothing through it; tasks it already started stay.',
      inputSchema: { subscription_id: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be a subscription id') },
      outputSchema: { deleted: z.string(), message: z.string() },
      annotations: { destructiveHint: true, idempotentHint: false },
    },
    async ({ subscription_id }) => {
      try {
        const r = await client.deleteSubscription(subscription_id);
        return ok({ deleted: r.deleted, message: `subscription ${r.deleted} deleted` });
      } catch (err) {
        return asFailure(err);
      }
    },
  );
}
