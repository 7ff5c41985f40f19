import { ScopeTooLongError } from './errors.js';

/**
 * S1: the longest scope idem stores, in UTF-8 bytes. A record's primary key is (scope, key), and
 * every store must hold it: MySQL's `scope` column holds 1,024 bytes, and PostgreSQL refuses a
 * btree index row over about 2,700 bytes (a third of a page), which 1,024 plus a 255-character key
 * stays well under. A longer scope is refused up front with 400 `idempotency_scope_too_long`,
 * rather than failing in the store as a 503 "retry later" that no retry can cure.
 */
export const MAX_SCOPE_BYTES = 1024;

/** Returns `scope`, or throws {@link ScopeTooLongError} when it is over {@link MAX_SCOPE_BYTES}. */
export function assertScopeFits(scope: string): string {
  const bytes = Buffer.byteLength(scope, 'utf8');
  if (bytes > MAX_SCOPE_BYTES) throw new ScopeTooLongError(bytes, MAX_SCOPE_BYTES);
  return scope;
}
