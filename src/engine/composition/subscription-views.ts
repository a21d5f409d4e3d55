import type { ChainRefusal } from '../../domain/chains.ts';
import type { ChainLinkRow, SubscriptionRow } from '../../store/schema.ts';
import { iso, preview } from '../views.ts';
import type { SubscriptionListRow } from './subscriptions.ts';

/** A subscription as the API, CLI and MCP show it (src/api/schemas/composition.ts, Subscription). */
export function subscriptionView(s: SubscriptionRow) {
  return {
    id: s.id,
    source_agent: s.source_agent,
    target_agent: s.target_agent,
    on: s.on_status,
    filter: {
      ...(s.schedule_id === null ? {} : { schedule_id: s.schedule_id }),
      ...(s.trigger_kind === null ? {} : { trigger: s.trigger_kind }),
    },
    message: s.message,
    payload: s.payload === null ? null : (JSON.parse(s.payload) as unknown),
    enabled: s.enabled === 1,
    created_at: iso(s.created_at)!,
    created_by: s.created_by,
    updated_at: iso(s.updated_at)!,
  };
}

/** A subscription in a list: the templates as previews (GET /v1/subscriptions/{id} has them whole). */
export function subscriptionListView(s: SubscriptionListRow) {
  const { payload: _payload, ...whole } = subscriptionView({ ...s, message: '', payload: null });
  return { ...whole, message: preview(s.message_head)!, payload_preview: preview(s.payload_head) };
}

/** One entry of an execution's `started`: what a matching subscription did with its final outcome. */
export function startedView(l: Pick<ChainLinkRow, 'subscription_id' | 'execution_id' | 'refused' | 'at'>) {
  return { subscription_id: l.subscription_id, execution_id: l.execution_id, refused: l.refused as ChainRefusal | null, at: iso(l.at)! };
}
