/**
 * @idem/envelop/graphql-core — the host-neutral GraphQL core that the Envelop/Yoga plugin and the
 * Apollo Server plugin (`@idem/apollo-server`) both translate: the key plan on graphql-js
 * (`collectFields`, `getArgumentValues`), the unit and its claim, the stored result and its
 * replay, and the error mapping (SPEC K, S, F, E, X3). It imports graphql-js and `@idem/core`
 * only. For host authors; applications use `useIdempotency`, `useYogaIdempotency` or
 * `useApolloIdempotency`.
 */
import {
  getOperationAST,
  type ASTNode,
  type ExecutionArgs,
  type ExecutionResult,
  type GraphQLError,
  type GraphQLObjectType,
  type GraphQLSchema,
  type OperationDefinitionNode,
  type ValidationRule,
} from 'graphql';
import {
  AmbiguousKeyError,
  idempotencyClaim,
  isIdempotencyError,
  type ClaimContext,
  type EndpointPolicyDescription,
  type IdempotencyEngine,
  type IdempotencyError,
} from '@idem/core';
import { createAdapterKit, type RequestScope } from '@idem/core/adapter';
import { requestUrlOf } from '@idem/core/http';
import { IDEMPOTENT_DIRECTIVE_NAME, IdempotentDirectivePlacementRule } from './directive.js';
import { idempotencyGraphQLError } from './error-mapping.js';
import { runFieldUnit, type IdempotencyResultExtension } from './field-unit.js';
import { documentForField } from './normalized-document.js';
import type { IdempotencyOptions } from './options.js';
import { planOperation, type KeyPlan, type PlannedUnit } from './plan.js';
import { endpointPolicies } from './policy.js';
import { headersOf, idempotencyKeyHeader, requestOf } from './request-headers.js';
import { asGraphQLError } from './stored-result.js';
import { runUnit, wrapRootResolvers, type ExecuteFn } from './unit.js';

export type { ExecuteFn } from './unit.js';
export type { IdempotencyOptions, GraphQLKeyOptions, FingerprintInput, RequestHeaders } from './options.js';
export type { IdempotencyResultExtension } from './field-unit.js';
export type { IdempotencyErrorExtensions, IdempotencyGraphQLErrorCode } from './error-mapping.js';
export type { StoredExecutionResult, StoredGraphQLError } from './stored-result.js';
export { idempotentDirective, idempotentDirectiveTypeDefs, IdempotentDirectivePlacementRule } from './directive.js';

/** What a host layer tells the core about the HTTP request of a GraphQL context. */
export interface HostIntegration {
  /** The factory's name in `[idem] …` option errors. Defaults to `'useIdempotency'`. */
  name?: string;
  /**
   * How many operations of a batch share this context's HTTP request, as the host counts them
   * (Yoga: its mutation operations; Apollo Server: all of them); undefined when it is not a batch.
   * A header key on a batch counted above 1 is refused with 400 `IDEMPOTENCY_KEY_AMBIGUOUS`.
   */
  batchedMutations?(context: unknown): number | undefined;
  /**
   * The HTTP request a GraphQL context was built for (its identity, its `headers`, its URL for
   * problem `type` links). Defaults to `context.request` (Yoga, Fetch), then `context.req` (Node).
   */
  requestOf?(context: unknown): object | undefined;
}

/** The core one host layer translates. */
export interface GraphQLIdempotency<TTx = unknown> {
  /** The engine (`engine.drain()` on shutdown waits for outcome writes being retried, E7). */
  readonly engine: IdempotencyEngine<TTx>;
  /** `idempotencyClaim(context)` with the store's transaction type, for resolvers in atomic mode. */
  claim(context: unknown): ClaimContext<TTx> | undefined;
  /** R4: one entry per root mutation field of `schema` (defaults to the last one prepared). */
  describeEndpoints(schema?: GraphQLSchema): EndpointPolicyDescription[];
  /**
   * Call once per schema before it executes: checks the `policy` coordinates against it and wraps
   * its root mutation resolvers once, so that they carry the claim.
   */
  prepareSchema(schema: GraphQLSchema): void;
  /** The validation rules the host adds: the `@idempotent` placement rule when directive keys are on. */
  readonly validationRules: readonly ValidationRule[];
  /**
   * Executes `args` through `execute`: a mutation operation under its claims (or replayed, or
   * refused as a result with `extensions.http` errors); anything else as `execute` does.
   */
  execute(args: ExecutionArgs, execute: ExecuteFn): unknown;
}

/** Whether `result` holds a replayed outcome of every unit it ran (E2). */
export function isReplayedResult(result: unknown): boolean {
  return idempotencyExtension(result)?.replayed === true;
}

/** Whether `result` holds a failure that left its key resumable (E8): the host answers `Idempotent-Resumable: true`. */
export function isResumableResult(result: unknown): boolean {
  return idempotencyExtension(result)?.resumable === true;
}

function idempotencyExtension(result: unknown): IdempotencyResultExtension | undefined {
  return (result as ExecutionResult | null)?.extensions?.['idempotency'] as IdempotencyResultExtension | undefined;
}

/**
 * The GraphQL core for one host. Refusals are GraphQLErrors with `extensions.code`,
 * `extensions.http` (status, `Retry-After`) and `extensions.idempotency` (the problem); a replay
 * carries `extensions.idempotency.replayed`, which the host turns into `Idempotent-Replayed: true`,
 * and a failure that left its key resumable (E8) `extensions.idempotency.resumable`, which the
 * host turns into `Idempotent-Resumable: true`.
 */
export function createGraphQLIdempotency<TContext extends Record<string, any> = Record<string, any>, TTx = unknown>(
  options: IdempotencyOptions<TContext, TTx>,
  host: HostIntegration = {},
): GraphQLIdempotency<TTx> {
  const requestFor = host.requestOf ?? requestOf;
  const {
    getHeaders = host.requestOf ? (context: unknown) => headersOf({ request: requestFor(context) }) : headersOf,
    serializer = JSON,
    atomic = false,
  } = options;
  const kit = createAdapterKit(options, { name: host.name ?? 'useIdempotency', field: 'argument' });
  const directive = options.key?.directive ?? true;
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
    const run = async ({ field, ...unit }: PlannedUnit) => {
      const policy = policies.forUnit(unit.coordinates);
      return runUnit(
        kit,
        atomic,
        field ? { ...args, document: documentForField(args.document, operation, field.nodes) } : args,
        execute,
        {
          ...scopeOf(unit.operation),
          key: unit.key,
          fingerprint: await kit.fingerprint(unit.input),
          serializer,
          parts: unit.parts,
          ...(field ? { responseKey: field.responseKey } : {}),
          ...policy,
          resume: (policy.onFailure ?? kit.engine.policy.onFailure) === 'resume',
        },
      );
    };
    if (plan.unit === 'field')
      return runFieldUnit(plan.fields, rootType.name, run, (error, field, http) =>
        refusalError(error, context, { nodes: field.nodes, path: [field.responseKey], http }),
      );
    try {
      const { result, replayed, resumable } = await run(plan.run);
      if (!replayed && !resumable) return result;
      const idempotency: IdempotencyResultExtension = replayed
        ? { replayed: true }
        : { replayed: false, resumable: true };
      return { ...result, extensions: { ...result.extensions, idempotency } };
    } catch (error) {
      if (isIdempotencyError(error)) return refuse(error, context, operation);
      throw error;
    }
  }

  /**
   * Batching rule: one header key covers one mutation operation. In a batch the host counted
   * every one of them is refused; otherwise a second operation of the same request taking the
   * header is refused.
   */
  function takeHeader(context: unknown): void {
    const request = requestFor(context);
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
      problem: kit.problem(error, requestUrlOf(requestFor(context))),
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
    prepareSchema(schema) {
      if (schema === lastSchema) return;
      policies.check(schema);
      wrapRootResolvers(schema);
      lastSchema = schema;
    },
    validationRules: directive ? [IdempotentDirectivePlacementRule] : [],
    execute(args, execute) {
      const operation = getOperationAST(args.document, args.operationName);
      const rootType = args.schema.getMutationType();
      // Queries and subscriptions are not touched.
      if (operation?.operation !== 'mutation' || !rootType) return execute(args);
      return executeIdempotently(args, operation, rootType, execute);
    },
  };
}
