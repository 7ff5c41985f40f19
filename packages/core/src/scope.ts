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

/**
 * Principal for endpoints whose keys are deliberately shared by every caller (S1). Passing it
 * is an explicit choice: a stored response may then be replayed to anyone with the key.
 */
export const sharedPrincipal = (): string => '*';

/** Builds a scope (S1): `<principal>/<operation>`, the principal percent-encoded. */
export function formatScope(operation: string, principal: string): string {
  return `${encodeURIComponent(principal)}/${operation}`;
}

/** A scope's two parts, as {@link formatScope} takes them. */
export interface ScopeParts {
  operation: string;
  principal: string;
}

/**
 * The operation and principal of a request's scope, for its events: the ones the request gives
 * (checked against its scope), else read back from a scope `formatScope` made (the principal is
 * encoded, so the first `/` ends it). A scope made otherwise is its own operation, principal `''`.
 * @throws TypeError `[idem] …` when the given parts do not make the scope, or only one is given.
 */
export function scopeParts(request: { scope: string; operation?: string; principal?: string }): ScopeParts {
  const { scope, operation, principal } = request;
  if (operation !== undefined && principal !== undefined) {
    if (formatScope(operation, principal) !== scope)
      throw new TypeError(
        "[idem] the request's `operation` and `principal` do not make its `scope`: pass `scope: formatScope(operation, principal)`, or leave them out",
      );
    return { operation, principal };
  }
  if (operation !== undefined || principal !== undefined)
    throw new TypeError('[idem] a request gives both `operation` and `principal`, or neither');
  const slash = scope.indexOf('/');
  if (slash >= 0) {
    try {
      return { operation: scope.slice(slash + 1), principal: decodeURIComponent(scope.slice(0, slash)) };
    } catch {
      // Not percent-encoded as formatScope encodes: not one of its scopes.
    }
  }
  return { operation: scope, principal: '' };
}
