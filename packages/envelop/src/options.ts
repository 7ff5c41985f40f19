import type { AdapterOptions } from '@idem/core';

/**
 * Request headers as the plugin reads them: a Fetch `Headers` (GraphQL Yoga, `context.request`)
 * or a Node `IncomingHttpHeaders`-like record (`context.req.headers`), names matched case-insensitively.
 */
export type RequestHeaders = { get(name: string): string | null } | Record<string, string | readonly string[] | undefined>;

/**
 * Which root mutation fields require a key (K2): all (`true`), none (`false`), the listed field
 * names, or those a function picks.
 */
export type RequiredKeyOption = boolean | readonly string[] | ((fieldName: string) => boolean);

/**
 * What the `fingerprint` option receives (F1, F2), per unit of idempotency:
 * - operation unit (header key): the normalized operation document and its coerced variables;
 * - field unit (argument or directive key): the field's coerced arguments without the key
 *   argument, and its effective selection: the printed selection set with `@skip`/`@include`
 *   applied, and the values of the variables it still reads (arguments of nested fields).
 *
 * `{ fields: ['variables.input.amount'] }` picks dotted paths out of this object.
 */
export type FingerprintInput =
  | { unit: 'operation'; document: string; variables: Record<string, unknown> }
  | { unit: 'field'; field: string; arguments: Record<string, unknown>; selection: string; variables: Record<string, unknown> };

/**
 * Options of {@link useIdempotency} and {@link useYogaIdempotency}: the shared adapter options
 * of `@idem/core` (`store`, `principal`, `fingerprint`, `retention`, `lease`, `expiredReuse`,
 * `serializer`, `onEvent`, `documentationUrl`, `conflictRetryAfter`, `unavailableRetryAfter`)
 * plus where keys come from.
 */
export interface IdempotencyOptions<TContext = Record<string, any>> extends Omit<AdapterOptions<TContext>, 'required'> {
  /**
   * K1: read the `Idempotency-Key` request header. A header key makes the whole mutation
   * operation one record (the operation unit). Defaults to `true`.
   */
  header?: boolean;
  /**
   * Where the request headers are, given the GraphQL context. Defaults to
   * `context.request.headers` (GraphQL Yoga, any Fetch `Request`), then `context.req.headers` (Node).
   */
  getHeaders?: (context: TContext) => RequestHeaders | null | undefined;
  /**
   * K4: the name of a mutation field argument that carries a key (the field unit); fields
   * without such an argument are not affected. `false` turns argument keys off. The argument is
   * left out of the fingerprint (F1). Defaults to `'idempotencyKey'`.
   */
  argument?: string | false;
  /**
   * K4: read keys from the executable directive `@idempotent(key: String!)` on root mutation
   * fields (the field unit). Declare it with {@link idempotentDirectiveTypeDefs}. Defaults to `true`.
   */
  directive?: boolean;
  /**
   * K2: root mutation fields that refuse to run without a key (400 `idempotency_key_missing`,
   * nothing executed). Other fields run without idempotency when no key is sent. Defaults to
   * `false`: the plugin covers every mutation of the schema, so pick the ones that need a key.
   */
  required?: RequiredKeyOption;
}

export const DEFAULT_KEY_ARGUMENT = 'idempotencyKey';

export function isRequiredField(option: RequiredKeyOption, fieldName: string): boolean {
  if (typeof option === 'boolean') return option;
  if (typeof option === 'function') return option(fieldName);
  return option.includes(fieldName);
}
