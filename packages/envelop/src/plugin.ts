import type { ExecutionArgs, GraphQLSchema } from 'graphql';
import type { Plugin } from '@envelop/core';
import type { ClaimContext, EndpointPolicyDescription, IdempotencyEngine } from '@idem/core';
import { createGraphQLIdempotency, type ExecuteFn, type HostIntegration } from './graphql-core/index.js';
import type { IdempotencyOptions } from './graphql-core/options.js';

export type { HostIntegration } from './graphql-core/index.js';

/**
 * The Envelop plugin, with the engine it runs on (`engine.drain()` on shutdown waits for outcome
 * writes being retried, E7), `claim(context)`: `idempotencyClaim(context)` with the store's
 * transaction type, for resolvers in atomic mode (`idempotency.claim(context)?.tx`), and
 * `describeEndpoints()`: its mutations as the published policy lists them (R4).
 */
export type IdempotencyPlugin<TContext extends Record<string, any>, TTx = unknown> = Plugin<TContext> & {
  readonly engine: IdempotencyEngine<TTx>;
  claim(context: unknown): ClaimContext<TTx> | undefined;
  /**
   * R4: one entry per root mutation field of `schema` (defaults to the schema the plugin last
   * saw), with its retention, lease and reuse rule, for `createPolicyDocument`.
   * @throws TypeError `[idem] …` when no schema is given and the plugin has seen none yet.
   */
  describeEndpoints(schema?: GraphQLSchema): EndpointPolicyDescription[];
};

/**
 * Idempotent GraphQL mutations as a plain Envelop plugin (SPEC K, S, F, E, X3). Queries and
 * subscriptions pass through. Errors are GraphQLErrors with `extensions.code` and
 * `extensions.http`, so it works in any Envelop host; with GraphQL Yoga use
 * {@link useYogaIdempotency}, which adds the `Idempotent-Replayed` header and the batching rule.
 *
 * - `Idempotency-Key` header → the mutation operation is one record, executed once;
 * - `idempotencyKey` argument or `@idempotent(key:)` → each root field is its own record (the
 *   header key, if sent, keys the one that has no key of its own), executed on its own so that
 *   its result can be stored and replayed on its own.
 *
 * The GraphQL logic lives in `@idem/envelop/graphql-core`, shared with `@idem/apollo-server`;
 * this plugin translates Envelop's hooks to it.
 */
export function useIdempotency<TContext extends Record<string, any> = Record<string, any>, TTx = unknown>(
  options: IdempotencyOptions<TContext, TTx>,
): IdempotencyPlugin<TContext, TTx> {
  return createIdempotencyPlugin(options, {});
}

/** @internal The plugin, for a host layer that knows more of the HTTP request (`useYogaIdempotency`). */
export function createIdempotencyPlugin<TContext extends Record<string, any>, TTx>(
  options: IdempotencyOptions<TContext, TTx>,
  host: HostIntegration,
): IdempotencyPlugin<TContext, TTx> {
  const core = createGraphQLIdempotency(options, host);
  return {
    engine: core.engine,
    claim: core.claim,
    describeEndpoints: core.describeEndpoints,
    onSchemaChange({ schema }) {
      core.prepareSchema(schema as GraphQLSchema);
    },
    onValidate({ addValidationRule }) {
      for (const rule of core.validationRules) addValidationRule(rule);
    },
    onExecute({ executeFn, setExecuteFn }) {
      const execute = executeFn as ExecuteFn;
      setExecuteFn((args: ExecutionArgs) => core.execute(args, execute));
    },
  };
}
