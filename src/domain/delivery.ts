/** How an agent's tasks reach it: `pull` (its workers claim them, the default) or `push` (Baton POSTs each task). */
export const DELIVERY_MODES = Object.freeze(['pull', 'push'] as const);
export type DeliveryMode = (typeof DELIVERY_MODES)[number];
