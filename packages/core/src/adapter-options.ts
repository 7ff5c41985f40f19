import { createEngine, type EngineOptions, type IdempotencyEngine } from './engine.ts';
import type { FingerprintOption } from './fingerprint.ts';
import type { Duration } from './duration.ts';

/**
 * Principal for endpoints whose keys are deliberately shared by every caller (S1). Passing it
 * is an explicit choice: a stored response may then be replayed to anyone with the key.
 */
export const sharedPrincipal = (): string => '*';

/**
 * Options every adapter (`@idem/trpc`, `@idem/envelop`) shares, on top of the engine's
 * (`store`, `retention`, `lease`, `expiredReuse`, `serializer`, `onEvent`, `documentationUrl`).
 */
export interface AdapterOptions<TContext> extends EngineOptions {
  /**
   * S1 (required): who the key belongs to — tenant, account or user — read from the request
   * context. Keys are scoped per principal, so a stored response is never replayed to another
   * caller. For keys shared by every caller, pass `sharedPrincipal` explicitly.
   */
  principal: (context: TContext) => string | Promise<string>;
  /** K2: whether a request without a key is refused (400) or runs without idempotency. Defaults to `true`. */
  required?: boolean;
  /** F1/F2: how the validated input is fingerprinted. Defaults to `'default'` (SHA-256 of the canonical input). */
  fingerprint?: FingerprintOption;
  /** R1: alias of `retention` — how long an outcome is kept and replayed. Defaults to 24 hours. */
  ttl?: Duration;
}

/**
 * What every adapter does first: checks the options that encode a policy (`principal`, the
 * `ttl`/`retention` alias) and builds the engine from the rest.
 * @throws TypeError `[idem] …` when `principal` is missing or `ttl` and `retention` disagree.
 */
export function createAdapterEngine(options: EngineOptions & { principal?: unknown; ttl?: Duration }, adapter: string): IdempotencyEngine {
  const { ttl, retention = ttl } = options;
  if (ttl !== undefined && options.retention !== undefined && ttl !== options.retention) {
    throw new TypeError('[idem] `ttl` is an alias of `retention`: pass one of them');
  }
  if (typeof options.principal !== 'function') {
    throw new TypeError(
      `[idem] ${adapter} needs a \`principal(context)\` function (S1): return the caller's tenant, account or user id, or pass \`sharedPrincipal\` for keys shared by every caller`,
    );
  }
  const { store, serializer, onEvent, documentationUrl, lease, expiredReuse, conflictRetryAfter, unavailableRetryAfter, maxStoredBytes } = options;
  return createEngine({ store, serializer, onEvent, documentationUrl, lease, expiredReuse, conflictRetryAfter, unavailableRetryAfter, maxStoredBytes, retention });
}
