/**
 * Domain errors. Services throw these; exactly one mapping (src/api/errors.ts) turns them
 * into HTTP answers `{ error, message, ...details }`. `code` is a closed union.
 */
export type ErrorCode =
  | 'not_found'
  | 'backlog_full'
  | 'lease_lost'
  | 'already_exists'
  | 'already_running'
  | 'invalid_transition'
  | 'wrong_delivery'
  | 'validation_error'
  | 'unauthorized'
  | 'forbidden'
  | 'payload_too_large'
  | 'unavailable'
  | 'idempotency_key_reused'
  | 'idempotency_in_flight'
  | 'rate_limited'
  | 'invalid_signature'
  | 'invalid_json'
  | 'group_refused'
  | 'too_many_streams'
  | 'last_admin_key'
  | 'pool_in_use';

/** Codes only the HTTP edge answers with (src/api/errors.ts): the request itself failed before any service ran. */
export type EdgeErrorCode =
  | 'unsupported_media_type'
  | 'invalid_body'
  | 'bad_request'
  | 'request_timeout'
  | 'headers_too_large'
  | 'method_not_allowed'
  | 'too_many_connections'
  | 'internal';

/** Every `error` an API answer may carry. */
export type ApiErrorCode = ErrorCode | EdgeErrorCode;

export class BatonError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'BatonError';
  }
}

export class NotFound extends BatonError {
  constructor(kind: string, id: string) {
    super('not_found', `${kind} '${id}' does not exist`, { kind, id });
  }
}

export class BacklogFull extends BatonError {
  constructor(agent: string, maxBacklog: number) {
    super('backlog_full', `agent '${agent}' already has ${maxBacklog} queued executions (max_backlog)`, {
      agent,
      max_backlog: maxBacklog,
    });
  }
}

/** The presented lease token is not the current one, or the row can no longer take it. */
export class LeaseLost extends BatonError {
  constructor(executionId: string, detail: { status?: string; error_code?: string | null; reason: string }) {
    super('lease_lost', `lease on execution '${executionId}' is no longer held: ${detail.reason}`, {
      execution_id: executionId,
      ...detail,
    });
  }
}

export class AlreadyExists extends BatonError {
  constructor(kind: string, id: string) {
    super('already_exists', `${kind} '${id}' already exists`, { kind, id });
  }
}

export class InvalidTransition extends BatonError {
  constructor(executionId: string, status: string, wanted: string) {
    super('invalid_transition', `execution '${executionId}' is ${status}; cannot ${wanted}`, {
      execution_id: executionId,
      status,
    });
  }
}

export class Unauthorized extends BatonError {
  constructor(message = 'a valid API key is required (Authorization: Bearer <key>)') {
    super('unauthorized', message);
  }
}

export class Forbidden extends BatonError {
  constructor(message: string) {
    super('forbidden', message);
  }
}

/** A run of the same schedule (or webhook) is not terminal and its overlap policy is `skip`. */
export class AlreadyRunning extends BatonError {
  constructor(subject: string, executionId: string) {
    super('already_running', `${subject} has a run in flight: execution '${executionId}'`, { execution_id: executionId });
  }
}

/** An execution already has as many log-follow streams in this process as it may (each costs every append a write). */
export class TooManyStreams extends BatonError {
  constructor(executionId: string, limit: number) {
    super(
      'too_many_streams',
      `execution '${executionId}' already has ${limit} log-follow streams on this server; retry later or read pages`,
      {
        execution_id: executionId,
        limit,
      },
    );
  }
}
