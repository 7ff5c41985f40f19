import type { EngineOptions } from './engine.ts';
import type { FingerprintOption } from './fingerprint.ts';

/**
 * Principal for endpoints whose keys are deliberately shared by every caller (S1). Passing it
 * is an explicit choice: a stored response may then be replayed to anyone with the key.
 */
export const sharedPrincipal = (): string => '*';

/** Where an adapter reads the key from (K1, K4). */
export type KeySource = 'header' | 'argument' | 'both';

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
}
