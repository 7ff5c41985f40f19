import type { EndpointPolicy } from '@idem/core';
import type { AdapterOptions, KeyOptions } from '@idem/core/adapter';

/**
 * Request headers as the plugin reads them: a Fetch `Headers` (GraphQL Yoga, `context.request`)
 * or a Node `IncomingHttpHeaders`-like record (`context.req.headers`), names matched case-insensitively.
 */
export type RequestHeaders =
  | { get(name: string): string | null }
  | Record<string, string | readonly string[] | undefined>;

/**
 * What the `fingerprint` option receives (F1, F2), per unit of idempotency:
 * - operation unit (header key): the normalized operation document and its coerced variables;
 * - field unit (argument or directive key): the field's coerced arguments without the key
 *   argument, and its selection as written: the printed selection set and the fragments it
 *   spreads, and the values of the variables it reads (nested arguments, `@skip`/`@include`).
 *
 * `{ fields: ['variables.input.amount'] }` picks dotted paths out of this object.
 */
export type FingerprintInput =
  | { unit: 'operation'; document: string; variables: Record<string, unknown> }
  | {
      unit: 'field';
      field: string;
      arguments: Record<string, unknown>;
      selection: string;
      variables: Record<string, unknown>;
    };

/** Where GraphQL keys come from: the shared `header` and `field` (here an argument), and the `@idempotent` directive. */
export interface GraphQLKeyOptions extends KeyOptions {
  /**
   * K4: read keys from the executable directive `@idempotent(key: String!)` on root mutation
   * fields (the field unit). Declare it with {@link idempotentDirectiveTypeDefs}. Defaults to `true`.
   */
  directive?: boolean;
}

/**
 * Options of {@link useIdempotency} and {@link useYogaIdempotency}: the options every idem adapter
 * takes (`@idem/core/adapter`'s `AdapterOptions`): `store`, `principal`, `required`, `key`,
 * `fingerprint`, `atomic` and the engine's `retention`, `lease`, `expiredReuse`, `onFailure`, `serializer`,
 * `onEvent`, `documentationUrl`, `conflictRetryAfter`, `unavailableRetryAfter`, `maxStoredBytes`.
 *
 * Here a header key makes the whole mutation operation one record (the operation unit); a key in
 * the `key.field` argument or in `@idempotent(key:)` makes its root field a record of its own (the
 * field unit). `required` (defaults to `true`: every mutation) names the root mutation fields
 * that refuse to run without a key: the plugin covers every mutation of the schema, so where some
 * mutations may run without one, list those that need one (`required: ['createPayment']`), or
 * pass a function or `false`.
 */
export interface IdempotencyOptions<TContext = Record<string, any>, TTx = unknown>
  extends AdapterOptions<TContext, TTx> {
  /** Where keys come from. Defaults to `{ header: true, field: 'idempotencyKey', directive: true }`. */
  key?: GraphQLKeyOptions;
  /**
   * Where the request headers are, given the GraphQL context. Defaults to
   * `context.request.headers` (GraphQL Yoga, any Fetch `Request`), then `context.req.headers` (Node).
   */
  getHeaders?: (context: TContext) => RequestHeaders | null | undefined;
  /**
   * R1, E6, E3w, R2, E8 per mutation, by schema coordinate (like `@envelop/response-cache`'s
   * `ttlPerSchemaCoordinate`): `{ 'Mutation.refund': { retention: '72h', lease: '2m', wait: '5s', expiredReuse: 'reject', onFailure: 'resume' } }`.
   * A field left out, and every field left out of an entry, has the plugin's `retention`,
   * `lease`, `wait`, `expiredReuse` and `onFailure` (a field with `onFailure: 'resume'` and no
   * retention anywhere keeps its keys 30 days). A header key over several root fields (one unit)
   * gets the longest retention and lease of its fields, the shortest wait, `'reject'` if any of
   * them rejects, and `'resume'` only if all of them resume. Published by `describeEndpoints()`
   * (R4). Defaults to `{}`.
   *
   * Under `onFailure: 'resume'` a unit's failure is resumable when one of its errors is a server
   * failure — an unexpected error (a plain `Error`, which Yoga and Apollo mask), or a GraphQLError
   * whose `extensions.http.status` is 500 or more — and none was thrown as `finalFailure(error)`;
   * a GraphQLError a resolver throws on purpose is the client's answer, stored and replayed.
   */
  policy?: Readonly<Record<string, EndpointPolicy>>;
}
