import type { AdapterOptions } from '@idem/core';

/**
 * Where the key comes from (K1, K4):
 * - `'header'`: the `Idempotency-Key` HTTP header (needs {@link idempotencyContext} in `createContext`);
 * - `'input'`: a field of the procedure's input, one key per call (works in batches);
 * - `'both'`: either; when both are sent they must be equal, otherwise 400 `idempotency_key_ambiguous`.
 */
export type IdempotencyKeySource = 'header' | 'input' | 'both';

export interface IdempotencyKeyOptions {
  /** Where the key is read from. Defaults to `'header'`. */
  from?: IdempotencyKeySource;
  /**
   * The input field holding the key when `from` is `'input'` or `'both'`. It is left out of the
   * fingerprint (F1). Declare it in your input schema (e.g. `idempotencyKey: z.string().optional()`);
   * a field your schema strips is read from the raw input. Defaults to `'idempotencyKey'`.
   */
  field?: string;
}

/**
 * Options of {@link idempotency}: the shared adapter options of `@idem/core` (`store`,
 * `principal`, `required`, `fingerprint`, `retention`, `lease`, `expiredReuse`, `serializer`,
 * `onEvent`, `documentationUrl`, `conflictRetryAfter`, `unavailableRetryAfter`) plus the key
 * source and the `ttl` alias.
 */
export interface IdempotencyOptions<TContext> extends AdapterOptions<TContext> {
  /** Where the key is read from. Defaults to the `Idempotency-Key` header. */
  key?: IdempotencyKeyOptions;
}

export const DEFAULT_KEY_FIELD = 'idempotencyKey';
