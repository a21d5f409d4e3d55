import { createCipheriv, createDecipheriv, createHash, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { AlreadyRunning, BacklogFull, BatonError, NotFound } from '../../domain/errors.ts';
import { newId } from '../../domain/ids.ts';
import { pageOfAgent } from '../../domain/lists.ts';
import type { Tx } from '../../store/adapter.ts';
import type { ExecutionRow, WebhookRow } from '../../store/schema.ts';
import { announce } from '../announce.ts';
import { appendAudit } from '../audit.ts';
import type { EngineContext } from '../context.ts';
import { previewHead } from '../list-executions.ts';
import { requireAgents } from '../require-agents.ts';
import type { Schedules } from './schedules.ts';
import { lockAgent, startRun, type OverlapPolicy } from './start-run.ts';

/**
 * Webhooks: a secret URL `/hooks/<token>` that starts a run of a schedule or an agent.
 * The token has 256 bits of randomness, is shown once, and only its SHA-256 is stored. An
 * optional HMAC secret is stored AES-256-GCM encrypted under a key derived from the token, so a
 * copy of the database alone reveals neither.
 */
export const TOKEN_PREFIX = 'bwh_';
const TOKEN_PATTERN = /^bwh_[A-Za-z0-9_-]{43}$/;
export const WEBHOOK_BODY_LIMIT = 64 * 1024;

export const hashToken = (token: string) => createHash('sha256').update(token).digest('hex');
export const looksLikeToken = (token: string) => TOKEN_PATTERN.test(token);
const newToken = () => TOKEN_PREFIX + randomBytes(32).toString('base64url');
// Standard base64 after the prefix, as Standard Webhooks senders expect (their libraries decode
// the part after `whsec_` as base64 to get the HMAC key).
const newSecret = () => 'whsec_' + randomBytes(32).toString('base64');

function keyFor(token: string, webhookId: string): Buffer {
  return Buffer.from(hkdfSync('sha256', token, 'baton-webhook-secret', webhookId, 32));
}

export function encryptSecret(secret: string, token: string, webhookId: string): string {
  const iv = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', keyFor(token, webhookId), iv);
  const data = Buffer.concat([c.update(secret, 'utf8'), c.final()]);
  return Buffer.concat([iv, c.getAuthTag(), data]).toString('base64url');
}

export function decryptSecret(enc: string, token: string, webhookId: string): string {
  const raw = Buffer.from(enc, 'base64url');
  const d = createDecipheriv('aes-256-gcm', keyFor(token, webhookId), raw.subarray(0, 12));
  d.setAuthTag(raw.subarray(12, 28));
  return Buffer.concat([d.update(raw.subarray(28)), d.final()]).toString('utf8');
}

/** `sha256=<hex>` of HMAC-SHA256(secret, body): what a sender puts in X-Baton-Signature. */
export function sign(secret: string, body: Buffer | string): string {
  return 'sha256=' + createHmac('sha256', secret).update(body).digest('hex');
}

/** Constant-time check of a `sha256=<hex>` header against the raw body. */
export function signatureValid(secret: string, body: Buffer, header: string | undefined): boolean {
  if (!header || !header.startsWith('sha256=')) return false;
  const expected = Buffer.from(sign(secret, body));
  const given = Buffer.from(header.trim());
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/**
 * Standard Webhooks (standardwebhooks.com): `webhook-signature` carries space-separated
 * `v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>">`, keyed by the secret —
 * for a `whsec_` secret, the base64 bytes after the prefix. The timestamp (Unix seconds) must lie
 * within the tolerance of now, so a captured delivery cannot be replayed later; within the window,
 * the delivery id is the idempotency key, so a replay returns the first answer.
 */
export const STANDARD_TOLERANCE_S = 5 * 60;

export interface StandardHeaders {
  id: string | undefined;
  timestamp: string | undefined;
  signature: string | undefined;
}

export type SignatureCheck = 'ok' | 'bad_signature' | 'stale_timestamp';

const standardKey = (secret: string) =>
  secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8');

/** `v1,<base64>` for a Standard Webhooks sender (and tests). */
export function signStandard(secret: string, id: string, timestamp: number, body: Buffer | string): string {
  return 'v1,' + createHmac('sha256', standardKey(secret)).update(`${id}.${timestamp}.`).update(body).digest('base64');
}

export function standardSignatureValid(
  secret: string,
  body: Buffer,
  h: StandardHeaders,
  nowMs: number,
  toleranceS = STANDARD_TOLERANCE_S,
): SignatureCheck {
  if (!h.id || !h.timestamp || !h.signature || !/^\d{1,12}$/.test(h.timestamp)) return 'bad_signature';
  const ts = Number(h.timestamp);
  if (Math.abs(nowMs / 1000 - ts) > toleranceS) return 'stale_timestamp';
  const expected = Buffer.from(signStandard(secret, h.id, ts, body));
  for (const candidate of h.signature.trim().split(/\s+/)) {
    const given = Buffer.from(candidate);
    if (given.length === expected.length && timingSafeEqual(given, expected)) return 'ok';
  }
  return 'bad_signature';
}

/**
 * Refused deliveries (bad signature, not JSON) are audited as one row per webhook, reason and
 * minute, with a count — not one row each, which would let anyone holding a token grow the
 * audit log at the rate limit. Counts are kept in memory and written when their minute is over
 * (on the next refusal or the flush timer) and when the process stops.
 */
export class RefusalLog {
  private readonly pending = new Map<
    string,
    { webhook: string; error: string; minute: number; count: number; first_at: number; last_at: number; addresses: Set<string> }
  >();
  constructor(private readonly engine: EngineContext) {}

  note(webhookId: string, error: string, sourceAddress: string): void {
    const now = this.engine.now();
    const minute = Math.floor(now / 60_000);
    const key = `${webhookId}\n${error}\n${minute}`;
    let p = this.pending.get(key);
    if (!p) this.pending.set(key, (p = { webhook: webhookId, error, minute, count: 0, first_at: now, last_at: now, addresses: new Set() }));
    p.count++;
    p.last_at = now;
    if (p.addresses.size < 5) p.addresses.add(sourceAddress);
  }

  /** Write the counts of minutes that are over (all of them with `all`). */
  async flush(all = false): Promise<number> {
    const minute = Math.floor(this.engine.now() / 60_000);
    const due = [...this.pending.entries()].filter(([, p]) => all || p.minute < minute);
    if (due.length === 0) return 0;
    for (const [k] of due) this.pending.delete(k);
    await this.engine.store.transaction(async (tx) => {
      for (const [, p] of due) {
        await appendAudit(tx, {
          at: p.first_at,
          actor: `webhook:${p.webhook}`,
          action: 'webhook.refused',
          subject: p.webhook,
          detail: {
            error: p.error,
            count: p.count,
            first_at: new Date(p.first_at).toISOString(),
            last_at: new Date(p.last_at).toISOString(),
            source_addresses: [...p.addresses],
          },
        });
      }
    });
    return due.length;
  }
}

export interface WebhookInput {
  name: string;
  agent?: string;
  schedule_id?: string;
  message?: string;
  overlap_policy?: OverlapPolicy;
  secret?: string;
  generate_secret?: boolean;
}

export interface Delivery {
  webhook: WebhookRow;
  token: string;
  body: unknown;
  sourceAddress: string;
  idempotencyKey: string | null;
  onCreated?: (tx: Tx, row: ExecutionRow) => Promise<void>;
}

export type DeliveryOutcome = { status: 'queued' | 'running'; execution_id: string } | { status: 'already_running'; execution_id: string };

/** A webhook as a list reads it: its message as a head, no token hash. */
export type WebhookListRow = Omit<WebhookRow, 'message' | 'token_hash'> & { message_head: string };

export class Webhooks {
  /** The engine's own Schedules (a webhook may target a schedule): one instance per engine. */
  constructor(
    private readonly engine: EngineContext,
    private readonly schedules: Schedules,
  ) {}

  private get store() {
    return this.engine.store;
  }

  async create(input: WebhookInput, actor: string): Promise<{ row: WebhookRow; token: string; secret: string | null }> {
    if (!input.agent === !input.schedule_id)
      throw new BatonError('validation_error', 'body.agent, body.schedule_id: give exactly one target');
    if (input.secret && input.generate_secret)
      throw new BatonError('validation_error', 'body.secret, body.generate_secret: give one or the other');
    const now = this.engine.now();
    const id = newId('wh_');
    const token = newToken();
    const secret = input.secret ?? (input.generate_secret ? newSecret() : null);
    const row = await this.store.transaction(async (tx) => {
      let agent = input.agent;
      if (input.schedule_id) {
        const s = await tx.selectFrom('schedules').select(['agent']).where('id', '=', input.schedule_id).executeTakeFirst();
        if (!s) throw new NotFound('schedule', input.schedule_id);
        agent = s.agent;
      } else {
        const a = await tx.selectFrom('agents').select('name').where('name', '=', agent!).executeTakeFirst();
        if (!a) throw new NotFound('agent', agent!);
      }
      const inserted = await tx
        .insertInto('webhooks')
        .values({
          id,
          agent: agent!,
          schedule_id: input.schedule_id ?? null,
          name: input.name,
          token_hash: hashToken(token),
          secret_enc: secret ? encryptSecret(secret, token, id) : null,
          message: input.message ?? `webhook ${input.name}`,
          overlap_policy: input.overlap_policy ?? 'allow',
          enabled: 1,
          created_at: now,
          updated_at: now,
          last_delivery_at: null,
        })
        .returningAll()
        .executeTakeFirstOrThrow();
      await appendAudit(tx, {
        at: now,
        actor,
        action: 'webhook.create',
        subject: id,
        detail: { agent, schedule_id: input.schedule_id ?? null, signed: secret !== null },
      });
      return inserted;
    });
    // A secret the caller chose is not echoed back; a generated one is shown this once.
    return { row, token, secret: input.generate_secret ? secret : null };
  }

  /**
   * A page of webhooks (every agent's, or one agent's) in (agent, name, id) order, through
   * webhooks_agent_name, starting after `after`. The message is cut to its
   * head in SQL: it may hold 100,000 characters, and a list answers with previews (webhookListView).
   */
  async list(
    agent: string | undefined,
    page: { limit: number; after?: { agent: string; name: string; id: string } },
  ): Promise<WebhookListRow[]> {
    let q = this.store.db
      .selectFrom('webhooks')
      .select([
        'id',
        'agent',
        'schedule_id',
        'name',
        'secret_enc',
        'overlap_policy',
        'enabled',
        'created_at',
        'updated_at',
        'last_delivery_at',
        previewHead('message').as('message_head'),
      ]);
    if (agent) {
      await requireAgents(this.store.db, [agent]);
      q = q.where('agent', '=', agent);
    }
    const after = page.after;
    // A row comparison: both stores seek the index to it (an OR of the columns scans; with the
    // agent fixed, only the rest of the key is a range inside the agent's part).
    if (after && agent) {
      pageOfAgent(after, agent);
      q = q.where((eb) => eb(eb.refTuple('name', 'id'), '>', eb.tuple(after.name, after.id)));
    } else if (after) q = q.where((eb) => eb(eb.refTuple('agent', 'name', 'id'), '>', eb.tuple(after.agent, after.name, after.id)));
    return q.orderBy('agent').orderBy('name').orderBy('id').limit(page.limit).execute();
  }

  async get(id: string): Promise<WebhookRow> {
    const row = await this.store.db.selectFrom('webhooks').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row) throw new NotFound('webhook', id);
    return row;
  }

  /**
   * A new token (the old one stops working at once). The signing secret was encrypted under the
   * old token, so a signed webhook gets a new secret too: the one given, or a generated one.
   */
  async rotate(id: string, given: string | undefined, actor: string): Promise<{ row: WebhookRow; token: string; secret: string | null }> {
    const now = this.engine.now();
    const token = newToken();
    let secret: string | null = null;
    const row = await this.store.transaction(async (tx) => {
      const before = await this.store.lockRows(tx.selectFrom('webhooks').selectAll().where('id', '=', id), 'wait').executeTakeFirst();
      if (!before) throw new NotFound('webhook', id);
      secret = given ?? (before.secret_enc ? newSecret() : null);
      const updated = await tx
        .updateTable('webhooks')
        .set({ token_hash: hashToken(token), secret_enc: secret ? encryptSecret(secret, token, id) : null, updated_at: now })
        .where('id', '=', id)
        .returningAll()
        .executeTakeFirstOrThrow();
      await appendAudit(tx, { at: now, actor, action: 'webhook.rotate', subject: id, detail: { signed: secret !== null } });
      return updated;
    });
    return { row, token, secret: given ? null : secret };
  }

  async delete(id: string, actor: string): Promise<void> {
    const now = this.engine.now();
    await this.store.transaction(async (tx) => {
      const gone = await tx.deleteFrom('webhooks').where('id', '=', id).executeTakeFirst();
      if (Number(gone.numDeletedRows) !== 1) throw new NotFound('webhook', id);
      await appendAudit(tx, { at: now, actor, action: 'webhook.delete', subject: id });
    });
  }

  /** The enabled webhook a token opens, or undefined (the caller answers a neutral 404). */
  async resolve(token: string): Promise<WebhookRow | undefined> {
    if (!looksLikeToken(token)) return undefined;
    const row = await this.store.db.selectFrom('webhooks').selectAll().where('token_hash', '=', hashToken(token)).executeTakeFirst();
    return row && row.enabled === 1 ? row : undefined;
  }

  /**
   * The overlap policy that governs each webhook's deliveries: its schedule's for a webhook aimed
   * at a schedule, its own otherwise (one query for the schedules).
   */
  async effectivePolicies(rows: Pick<WebhookRow, 'id' | 'schedule_id' | 'overlap_policy'>[]): Promise<Map<string, OverlapPolicy>> {
    const ids = [...new Set(rows.map((w) => w.schedule_id).filter((x): x is string => x !== null))];
    const schedules = ids.length
      ? await this.store.db.selectFrom('schedules').select(['id', 'overlap_policy']).where('id', 'in', ids).execute()
      : [];
    const bySchedule = new Map(schedules.map((s) => [s.id, s.overlap_policy as OverlapPolicy]));
    return new Map(rows.map((w) => [w.id, (w.schedule_id && bySchedule.get(w.schedule_id)) || (w.overlap_policy as OverlapPolicy)]));
  }

  /** The webhook's signing secret, or null when deliveries need no signature. */
  secretOf(w: WebhookRow, token: string): string | null {
    return w.secret_enc ? decryptSecret(w.secret_enc, token, w.id) : null;
  }

  /**
   * Start the run a delivery asks for. The caller's JSON body reaches the execution as payload
   * context (`payload.webhook.body`). Busy under `skip`: the delivery is coalesced into the run in
   * flight (no row created) and that run's id is returned.
   */
  async deliver(d: Delivery): Promise<DeliveryOutcome> {
    const w = d.webhook;
    const origin = { webhook_id: w.id, source_address: d.sourceAddress };
    const context = { id: w.id, name: w.name, body: d.body };
    if (w.schedule_id) {
      const s = await this.store.db.selectFrom('schedules').select('payload').where('id', '=', w.schedule_id).executeTakeFirst();
      if (!s) throw new NotFound('schedule', w.schedule_id);
      const base = JSON.parse(s.payload) as unknown;
      const payload =
        base !== null && typeof base === 'object' && !Array.isArray(base)
          ? { ...base, webhook: context }
          : { payload: base, webhook: context };
      try {
        const row = await this.schedules.trigger(w.schedule_id, {
          actor: `webhook:${w.id}`,
          trigger: 'webhook',
          origin,
          payload,
          idempotencyKey: d.idempotencyKey,
          webhookId: w.id,
          onCreated: async (tx, row) => {
            await tx.updateTable('webhooks').set({ last_delivery_at: row.created_at }).where('id', '=', w.id).execute();
            await d.onCreated?.(tx, row);
          },
        });
        return { status: row.status as 'queued', execution_id: row.id };
      } catch (err) {
        if (err instanceof AlreadyRunning) return { status: 'already_running', execution_id: String(err.details.execution_id) };
        throw err;
      }
    }
    const now = this.engine.now();
    const actor = `webhook:${w.id}`;
    const out = await this.store.transaction(async (tx) => {
      const agent = await lockAgent(tx, this.store, w.agent);
      if (!agent) throw new NotFound('agent', w.agent);
      const r = await startRun(
        tx,
        this.store,
        agent,
        {
          scheduleId: null,
          scheduledFor: null,
          webhookId: w.id,
          overlap: w.overlap_policy,
          trigger: 'webhook',
          origin,
          message: w.message,
          payload: JSON.stringify({ webhook: context }),
          priority: 0,
          retryPolicy: null,
          idempotencyKey: d.idempotencyKey,
        },
        now,
        actor,
        {
          each: (row) => ({
            at: now,
            actor,
            action: 'webhook.trigger',
            subject: w.id,
            execution_id: row.id,
            detail: { trigger: 'webhook', agent: w.agent },
          }),
        },
      );
      if (r.kind === 'created') {
        await tx.updateTable('webhooks').set({ last_delivery_at: now }).where('id', '=', w.id).execute();
        await d.onCreated?.(tx, r.row);
      } else {
        await appendAudit(tx, {
          at: now,
          actor,
          action: 'webhook.trigger.refused',
          subject: w.id,
          execution_id: r.kind === 'busy' ? r.execution_id : null,
          detail: { error: r.kind === 'busy' ? 'already_running' : 'backlog_full' },
        });
      }
      return r;
    });
    if (out.kind === 'busy') return { status: 'already_running', execution_id: out.execution_id };
    if (out.kind === 'full') throw new BacklogFull(w.agent, out.max_backlog);
    announce(this.store, [out.row]);
    return { status: out.row.status as 'queued', execution_id: out.row.id };
  }
}
