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
import { createAdapterKit, requestUrlOf } from '@idem/core/adapter';
import { IDEMPOTENT_DIRECTIVE_NAME, IdempotentDirectivePlacementRule } from './directive.js';
import { idempotencyGraphQLError } from './error-mapping.js';
import { FieldUnitResult, type FieldOutcome, type IdempotencyResultExtension } from './field-unit-result.js';
import { documentForField, fieldSelection, normalizedOperation } from './normalized-document.js';
import type { FingerprintInput, IdempotencyOptions } from './options.js';
import { planOperation, type KeyedField, type PlannedOperation, type RootField } from './plan.js';
import { endpointPolicies } from './policy.js';
import { headersOf, idempotencyKeyHeader, requestOf } from './request-headers.js';
import { asGraphQLError, storedResultSerializer } from './stored-result.js';
import { runUnit, UnstartedExecution, wrapRootResolvers, type ExecuteFn, type UnitRequest } from './unit.js';

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
    let header: string | undefined;
    try {
      header = kit.headerKey(idempotencyKeyHeader(getHeaders(context)), host.batchedMutations?.(context));
      if (header !== undefined) takeHeader(context);
    } catch (error) {
      if (isIdempotencyError(error)) return refuse(error, context, operation);
      throw error;
    }
    const idempotent = directive ? (args.schema.getDirective(IDEMPOTENT_DIRECTIVE_NAME) ?? undefined) : undefined;
    const planned = planOperation(args, operation, rootType, { kit, header, directive: idempotent });
    const { plan } = planned;
    if (plan.unit === 'unexecutable') return plan.result;
    if (plan.unit === 'refused') return refuse(plan.error, context, operation);
    if (plan.unit === 'none') return execute(args);

    let scopeOf: (operation: string) => string;
    try {
      scopeOf = await kit.scopes(context);
    } catch (error) {
      // Authentication failed before anything ran: nothing claimed, nothing stored (E4).
      return { errors: [asGraphQLError(error)] };
    }
    if (plan.unit === 'field') return runFields(args, execute, operation, planned, plan.fields, scopeOf);
    const names = [...new Set(planned.rootFields.filter((field) => field.definition).map((field) => field.fieldName))];
    names.sort();
    const input: FingerprintInput = {
      unit: 'operation',
      document: normalizedOperation(operation, planned.fragments),
      variables: planned.variables,
    };
    const coordinates = names.map((name) => `${rootType.name}.${name}`);
    try {
      const { result, replayed } = await unit(args, execute, {
        scope: scopeOf(`mutation:${names.join(',')}`),
        key: plan.key,
        serializer: resultSerializer,
        input,
        parts: planned.rootFields.length,
        coordinates,
      });
      if (!replayed) return result;
      const idempotency: IdempotencyResultExtension = { replayed: true };
      return { ...result, extensions: { ...result.extensions, idempotency } };
    } catch (error) {
      if (error instanceof UnstartedExecution) return error.result;
      if (isIdempotencyError(error)) return refuse(error, context, operation);
      throw error;
    }
  }

  /** One unit, its fingerprint and policy added (see `runUnit`). */
  async function unit(
    args: ExecutionArgs,
    execute: ExecuteFn,
    {
      input,
      coordinates,
      ...request
    }: Omit<UnitRequest, 'fingerprint'> & { input: FingerprintInput; coordinates: string[] },
  ) {
    const fingerprint = await kit.fingerprint(input);
    return runUnit(kit, atomic, args, execute, { ...request, fingerprint, ...policies.forUnit(coordinates) });
  }

  /**
   * The field unit: root fields run one after another, each keyed one as an execution of its own,
   * so that its result is stored (or replayed) on its own.
   */
  async function runFields(
    args: ExecutionArgs,
    execute: ExecuteFn,
    operation: OperationDefinitionNode,
    planned: PlannedOperation,
    fields: ReadonlyArray<KeyedField | RootField>,
    scopeOf: (operation: string) => string,
  ): Promise<ExecutionResult> {
    const rootTypeName = args.schema.getMutationType()!.name;
    const response = new FieldUnitResult(fields);
    for (const field of fields) {
      let outcome: FieldOutcome;
      if (!('key' in field)) {
        outcome = { ran: { data: { [field.responseKey]: rootTypeName } } };
      } else {
        const { responseKey, fieldName, nodes, key } = field;
        const coordinate = `${rootTypeName}.${fieldName}`;
        const input: FingerprintInput = {
          unit: 'field',
          field: fieldName,
          arguments: withoutKeyArgument(field.arguments, kit.key.field),
          ...fieldSelection(nodes, planned.fragments, planned.variables),
        };
        const document = documentForField(args.document, operation, nodes);
        try {
          const { result, replayed } = await unit({ ...args, document }, execute, {
            scope: scopeOf(coordinate),
            key,
            serializer: resultSerializer,
            input,
            parts: 1,
            coordinates: [coordinate],
            responseKey,
          });
          outcome = { ran: result, replayed };
        } catch (error) {
          if (error instanceof UnstartedExecution) outcome = { notStarted: error.result };
          else if (isIdempotencyError(error)) outcome = { refused: error };
          else throw error;
        }
      }
      if (!response.add(field, outcome)) break;
    }
    return response.result((error, field, http) =>
      refusalError(error, args.contextValue, { nodes: field.nodes, path: [field.responseKey], http }),
    );
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

/** F1: a field's arguments without its key argument. */
function withoutKeyArgument(values: Record<string, unknown>, field: string | false): Record<string, unknown> {
  if (field === false || !(field in values)) return values;
  const { [field]: _key, ...rest } = values;
  return rest;
}
