import { createEngine, type EngineOptions, type IdempotencyEngine } from './engine.js';
import type { IdempotencyStore } from './store.js';
import type { FingerprintOption } from './fingerprint.js';
import type { Duration } from './duration.js';

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
  /**
   * Atomic mode: the resolver runs inside the store's database transaction and finds it as
   * `idempotencyClaim(ctx).tx` (the Drizzle transaction). Its writes through `tx` commit together
   * with the claim and the stored outcome, or not at all: a crash before the commit leaves
   * nothing, so the retry executes cleanly; a resolver error rolls its writes back (the error is
   * still stored and replayed, E4); a transaction that fails to commit answers 503. Needs a store
   * whose transactions can span the resolver's `await`s: `@idem/drizzle` on PostgreSQL (SQLite's
   * atomic mode takes synchronous handlers only, through `engine.executeAtomic`). Refused when the
   * adapter is created otherwise. Defaults to `false`.
   */
  atomic?: boolean;
}

/**
 * What every adapter does first: checks the options that encode a policy (`principal`, the
 * `ttl`/`retention` alias) and builds the engine from the rest.
 * @throws TypeError `[idem] …` when `principal` is missing, `ttl` and `retention` disagree, or
 * `atomic` is set on a store without atomic mode for asynchronous handlers.
 */
export function createAdapterEngine(options: EngineOptions & { principal?: unknown; ttl?: Duration; atomic?: boolean }, adapter: string): IdempotencyEngine {
  const { ttl, retention = ttl } = options;
  if (ttl !== undefined && options.retention !== undefined && ttl !== options.retention) {
    throw new TypeError('[idem] `ttl` is an alias of `retention`: pass one of them');
  }
  if (typeof options.principal !== 'function') {
    throw new TypeError(
      `[idem] ${adapter} needs a \`principal(context)\` function (S1): return the caller's tenant, account or user id, or pass \`sharedPrincipal\` for keys shared by every caller`,
    );
  }
  if (options.atomic) assertAdapterAtomicMode(options.store, adapter);
  const { store, serializer, onEvent, documentationUrl, lease, expiredReuse, conflictRetryAfter, unavailableRetryAfter, maxStoredBytes } = options;
  return createEngine({ store, serializer, onEvent, documentationUrl, lease, expiredReuse, conflictRetryAfter, unavailableRetryAfter, maxStoredBytes, retention });
}

/** The adapters' handlers (a tRPC `next()`, a GraphQL execution) await: atomic mode needs a store whose transactions can. */
function assertAdapterAtomicMode(store: IdempotencyStore, adapter: string): void {
  if (!store.atomicClaim || !store.atomicComplete || store.atomicHandlers === undefined) {
    throw new TypeError(`[idem] ${adapter}: \`atomic: true\` needs a store with atomic mode (@idem/drizzle on PostgreSQL); this store has none`);
  }
  if (store.atomicHandlers === 'synchronous') {
    throw new TypeError(
      `[idem] ${adapter}: atomic mode in the adapters needs PostgreSQL: on SQLite (better-sqlite3) a transaction cannot span the resolver's awaits. On SQLite, atomic mode is available through \`engine.executeAtomic\` with a synchronous handler.`,
    );
  }
}
