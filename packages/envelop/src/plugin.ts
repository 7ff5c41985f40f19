import {
  getOperationAST,
  type ASTNode,
  type ExecutionArgs,
  type ExecutionResult,
  type GraphQLError,
  type GraphQLObjectType,
  type GraphQLSchema,
  type OperationDefinitionNode,
} from 'graphql';
import type { Plugin } from '@envelop/core';
import {
  AmbiguousKeyError,
  idempotencyClaim,
  isIdempotencyError,
  type ClaimContext,
  type EndpointPolicyDescription,
  type IdempotencyEngine,
  type IdempotencyError,
} from '@idem/core';
import { createAdapterKit, requestUrlOf, type RequestScope } from '@idem/core/adapter';
import { IDEMPOTENT_DIRECTIVE_NAME, IdempotentDirectivePlacementRule } from './directive.js';
import { idempotencyGraphQLError } from './error-mapping.js';
import { runFieldUnit, type IdempotencyResultExtension } from './field-unit.js';
import { documentForField } from './normalized-document.js';
import type { IdempotencyOptions } from './options.js';
import { planOperation, type KeyPlan, type PlannedUnit } from './plan.js';
import { endpointPolicies } from './policy.js';
import { headersOf, idempotencyKeyHeader, requestOf } from './request-headers.js';
import { asGraphQLError, storedResultSerializer } from './stored-result.js';
import { runUnit, UnstartedExecution, wrapRootResolvers, type ExecuteFn } from './unit.js';

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

/** What a host layer (the Yoga plugin) tells the Envelop plugin about the HTTP request. */
export interface HostIntegration {
  /** How many mutation operations share this context's HTTP request (a Yoga batch); undefined when it is not a batch. */
  batchedMutations?(context: unknown): number | undefined;
}

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
  const { getHeaders = headersOf, serializer = JSON, atomic = false } = options;
  const kit = createAdapterKit(options, { name: 'useIdempotency', field: 'argument' });
  const directive = options.key?.directive ?? true;
  const resultSerializer = storedResultSerializer(serializer);
  const policies = endpointPolicies(options.policy ?? {}, kit.engine.policy);
  let lastSchema: GraphQLSchema | undefined;
  /** HTTP requests whose `Idempotency-Key` header a mutation operation already took. */
  const headerTaken = new WeakSet<object>();

  /** The one path from a parsed mutation to its resolvers: a complete key plan, then its units under their claims. */
  async function executeIdempotently(
    args: ExecutionArgs,
    operation: OperationDefinitionNode,
    rootType: GraphQLObjectType,
    execute: ExecuteFn,
  ): Promise<unknown> {
    const context = args.contextValue as TContext;
    let plan: KeyPlan;
    try {
      const header = kit.headerKey(idempotencyKeyHeader(getHeaders(context)), host.batchedMutations?.(context));
      if (header !== undefined) takeHeader(context);
      const idempotent = directive ? (args.schema.getDirective(IDEMPOTENT_DIRECTIVE_NAME) ?? undefined) : undefined;
      plan = planOperation(args, operation, rootType, { kit, header, directive: idempotent });
    } catch (error) {
      if (isIdempotencyError(error)) return refuse(error, context, operation);
      throw error;
    }
    if (plan.unit === 'unexecutable') return plan.result;
    if (plan.unit === 'refused') return refuse(plan.error, context, operation);
    if (plan.unit === 'none') return execute(args);

    let scopeOf: (operation: string) => RequestScope;
    try {
      scopeOf = await kit.scopes(context);
    } catch (error) {
      // Authentication failed before anything ran: nothing claimed, nothing stored (E4).
      return { errors: [asGraphQLError(error)] };
    }
    const run = async ({ field, ...unit }: PlannedUnit) =>
      runUnit(
        kit,
        atomic,
        field ? { ...args, document: documentForField(args.document, operation, field.nodes) } : args,
        execute,
        {
          ...scopeOf(unit.operation),
          key: unit.key,
          fingerprint: await kit.fingerprint(unit.input),
          serializer: resultSerializer,
          parts: unit.parts,
          ...(field ? { responseKey: field.responseKey } : {}),
          ...policies.forUnit(unit.coordinates),
        },
      );
    if (plan.unit === 'field')
      return runFieldUnit(plan.fields, rootType.name, run, (error, field, http) =>
        refusalError(error, context, { nodes: field.nodes, path: [field.responseKey], http }),
      );
    try {
      const { result, replayed } = await run(plan.run);
      if (!replayed) return result;
      const idempotency: IdempotencyResultExtension = { replayed: true };
      return { ...result, extensions: { ...result.extensions, idempotency } };
    } catch (error) {
      if (error instanceof UnstartedExecution) return error.result;
      if (isIdempotencyError(error)) return refuse(error, context, operation);
      throw error;
    }
  }

  /**
   * Batching rule: one header key covers one mutation operation. In a Yoga batch with several
   * mutation operations every one of them is refused (the Yoga layer counts them up front);
   * without the Yoga layer, a second operation of the same request taking the header is refused.
   */
  function takeHeader(context: unknown): void {
    const request = requestOf(context);
    if (!request) return;
    if (headerTaken.has(request)) {
      throw new AmbiguousKeyError(
        'Another mutation operation of this request already used its Idempotency-Key header; one header key covers one operation. Put keys in arguments instead.',
      );
    }
    headerTaken.add(request);
  }

  /** X3: a refusal as a GraphQLError, its problem type resolved against the HTTP request of `context`. */
  function refusalError(
    error: IdempotencyError,
    context: unknown,
    placement: { nodes: readonly ASTNode[]; path?: readonly string[]; http?: boolean },
  ): GraphQLError {
    return idempotencyGraphQLError(error, {
      problem: kit.problem(error, requestUrlOf(requestOf(context))),
      ...placement,
    });
  }

  function refuse(error: IdempotencyError, context: unknown, operation: OperationDefinitionNode): ExecutionResult {
    return { errors: [refusalError(error, context, { nodes: [operation] })] };
  }

  return {
    engine: kit.engine,
    claim: (context) => idempotencyClaim(context) as ClaimContext<TTx> | undefined,
    describeEndpoints(schema = lastSchema) {
      if (!schema) throw new TypeError('[idem] describeEndpoints(): the plugin has not seen a schema yet; pass one.');
      return policies.describe(schema, {
        kit,
        directive: directive && !!schema.getDirective(IDEMPOTENT_DIRECTIVE_NAME),
      });
    },
    onSchemaChange({ schema }) {
      policies.check(schema as GraphQLSchema);
      wrapRootResolvers(schema as GraphQLSchema);
      lastSchema = schema as GraphQLSchema;
    },
    onValidate({ addValidationRule }) {
      if (directive) addValidationRule(IdempotentDirectivePlacementRule);
    },
    onExecute({ executeFn, setExecuteFn }) {
      const execute = executeFn as ExecuteFn;
      setExecuteFn((args: ExecutionArgs) => {
        const operation = getOperationAST(args.document, args.operationName);
        const rootType = args.schema.getMutationType();
        // Queries and subscriptions are not touched.
        if (operation?.operation !== 'mutation' || !rootType) return execute(args);
        return executeIdempotently(args, operation, rootType, execute);
      });
    },
  };
}
