import type { AdapterOptions } from '@idem/core/adapter';

/**
 * Options of {@link idempotency}: the options every idem adapter takes (`@idem/core/adapter`'s
 * `AdapterOptions`): `store`, `principal`, `required`, `key`, `fingerprint`, `atomic` and the
 * engine's `retention`, `lease`, `expiredReuse`, `onFailure`, `serializer`, `onEvent`, `documentationUrl`,
 * `conflictRetryAfter`, `unavailableRetryAfter`, `maxStoredBytes`. These are per procedure: each
 * procedure's own `idempotency(…)` middleware carries them.
 *
 * Here `key.field` is a field of the procedure's input (one key per call, so it works in
 * batches): declare it in your input schema (e.g. `idempotencyKey: z.string().optional()`); a
 * field your schema strips is read from the raw input. The header needs
 * {@link idempotencyContext} in `createContext`. `required` names procedure paths.
 */
export type IdempotencyOptions<TContext, TTx = unknown> = AdapterOptions<TContext, TTx>;
