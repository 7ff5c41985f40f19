import {
  getArgumentValues,
  getOperationAST,
  getVariableValues,
  GraphQLError,
  type ASTNode,
  type ExecutionArgs,
  type ExecutionResult,
  type FragmentDefinitionNode,
  type GraphQLSchema,
  type OperationDefinitionNode,
} from 'graphql';
import { isAsyncIterable, type Plugin } from '@envelop/core';
import {
  AmbiguousKeyError,
  HandlerNotStartedError,
  idempotencyClaim,
  isIdempotencyError,
  type ClaimContext,
  type ExecuteResult,
  type IdempotencyEngine,
  type IdempotencyError,
} from '@idem/core';
import { createAdapterKit, requestUrlOf, type AdapterKit } from '@idem/core/adapter';
import { committedOrRolledBack, RolledBackExecution, rolledBackCodec } from './atomic-result.js';
import { IdempotentDirectivePlacementRule } from './directive-placement-rule.js';
import { IDEMPOTENT_DIRECTIVE_NAME } from './directive.js';
import { idempotencyGraphQLError } from './error-mapping.js';
import { planKeys } from './key-plan.js';
import { FieldUnitResult, type FieldOutcome, type IdempotencyResultExtension } from './field-unit-result.js';
import { documentForField, effectiveSelection, fragmentsOf, normalizedOperation } from './normalized-document.js';
import type { FingerprintInput, IdempotencyOptions } from './options.js';
import { headersOf, idempotencyKeyHeader, requestOf } from './request-headers.js';
import { collectRootFields, type RootField } from './root-fields.js';
import {
  asGraphQLError,
  fromStoredResult,
  graphqlErrorCodec,
  storedResultSerializer,
  underResponseKey,
  type StoredExecutionResult,
} from './stored-result.js';
import { runUnderClaim, wrapRootResolvers } from './unit-claim.js';

/**
 * The Envelop plugin, with the engine it runs on (`engine.drain()` on shutdown waits for outcome
 * writes being retried, E7) and `claim(context)`: `idempotencyClaim(context)` with the store's
 * transaction type, for resolvers in atomic mode (`idempotency.claim(context)?.tx`).
 */
export type IdempotencyPlugin<TContext extends Record<string, any>, TTx = unknown> = Plugin<TContext> & {
  readonly engine: IdempotencyEngine<TTx>;
  claim(context: unknown): ClaimContext<TTx> | undefined;
};

/** What a host layer (the Yoga plugin) tells the Envelop plugin about the HTTP request. */
export interface HostIntegration {
  /** How many mutation operations share this context's HTTP request (a Yoga batch); undefined when it is not a batch. */
  batchedMutations?(context: unknown): number | undefined;
}

type ExecuteFn = (args: ExecutionArgs) => unknown;
interface Mutation {
  operation: OperationDefinitionNode;
  fragments: ReadonlyMap<string, FragmentDefinitionNode>;
  variables: Record<string, unknown>;
  rootFields: RootField[];
  rootTypeName: string;
}

/** A unit's execution that never reached a resolver: its result is answered, nothing stored (E4). */
class UnstartedExecution {
  constructor(readonly result: ExecutionResult) {}
}

/**
 * Idempotent GraphQL mutations as a plain Envelop plugin (SPEC K, S, F, E, X3). Queries and
 * subscriptions pass through. Errors are GraphQLErrors with `extensions.code` and
 * `extensions.http`, so it works in any Envelop host; with GraphQL Yoga use
 * {@link useYogaIdempotency}, which adds the `Idempotent-Replayed` header and the batching rule.
 *
 * - `Idempotency-Key` header → the mutation operation is one record, executed once;
 * - `idempotencyKey` argument or `@idempotent(key:)` → each keyed root field is its own record,
 *   executed on its own so that its result can be stored and replayed on its own.
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
  /** HTTP requests whose `Idempotency-Key` header a mutation operation already took. */
  const headerTaken = new WeakSet<object>();

  async function executeIdempotently(args: ExecutionArgs, execute: ExecuteFn): Promise<unknown> {
    const schema = args.schema as GraphQLSchema;
    const operation = getOperationAST(args.document, args.operationName);
    const rootType = schema.getMutationType();
    if (operation?.operation !== 'mutation' || !rootType) return execute(args);
    const coerced = getVariableValues(
      schema,
      operation.variableDefinitions ?? [],
      (args.variableValues ?? {}) as Record<string, unknown>,
    );
    // Unusable variables: graphql-js reports them and runs nothing; there is nothing to claim.
    if (coerced.errors) return execute(args);
    wrapRootResolvers(schema);
    const fragments = fragmentsOf(args.document);
    const variables = coerced.coerced;
    const rootFields = collectRootFields(schema, rootType, operation.selectionSet, fragments, variables);
    const mutation: Mutation = { operation, fragments, variables, rootFields, rootTypeName: rootType.name };
    const context = args.contextValue as TContext;

    let plan;
    try {
      const header = kit.headerKey(idempotencyKeyHeader(getHeaders(context)), host.batchedMutations?.(context));
      if (header !== undefined) takeHeader(context);
      const directiveType = directive ? (schema.getDirective(IDEMPOTENT_DIRECTIVE_NAME) ?? undefined) : undefined;
      plan = planKeys(rootFields, { kit, header, directive: directiveType, variables, rootTypeName: rootType.name });
    } catch (error) {
      if (isIdempotencyError(error)) return refuse(error, context, operation);
      // An argument that does not coerce: execution reports it where it belongs.
      if (error instanceof GraphQLError) return execute(args);
      throw error;
    }
    if (plan.unit === 'none') return execute(args);

    let scopeOf: (operation: string) => string;
    try {
      scopeOf = await kit.scopes(context);
    } catch (error) {
      // Authentication failed before anything ran: nothing claimed, nothing stored (E4).
      return { errors: [asGraphQLError(error)] };
    }
    if (plan.unit === 'field') return runFields(args, execute, mutation, plan.keys, scopeOf);
    const names = [...new Set(rootFields.filter((field) => field.definition).map((field) => field.fieldName))].sort();
    const input: FingerprintInput = {
      unit: 'operation',
      document: normalizedOperation(operation, fragments),
      variables,
    };
    try {
      const unit = await runUnit(
        scopeOf(`mutation:${names.join(',')}`),
        plan.key,
        input,
        args,
        execute,
        rootFields.length,
      );
      return unit.replayed
        ? {
            ...unit.result,
            extensions: {
              ...unit.result.extensions,
              idempotency: { replayed: true } satisfies IdempotencyResultExtension,
            },
          }
        : unit.result;
    } catch (error) {
      if (error instanceof UnstartedExecution) return error.result;
      if (isIdempotencyError(error)) return refuse(error, context, operation);
      throw error;
    }
  }

  /**
   * One unit of idempotency — the operation, or one keyed root field — executed once under its
   * claim (in atomic mode inside the store's transaction), or replayed. Refusals are thrown.
   */
  async function runUnit(
    scope: string,
    key: string,
    input: FingerprintInput,
    args: ExecutionArgs,
    execute: ExecuteFn,
    parts: number,
    responseKey?: string,
  ) {
    const source = args.document.loc?.source;
    const errors = graphqlErrorCodec(source);
    const request = {
      scope,
      key,
      fingerprint: await kit.fingerprint(input),
      serializer: resultSerializer,
      errors: atomic ? rolledBackCodec(errors) : errors,
    };
    const outcome: ExecuteResult<ExecutionResult | StoredExecutionResult> = await kit.execute(
      request,
      async (claim) => {
        const { result, started } = await runUnderClaim(args.contextValue, claim, parts, () =>
          executeOnce(execute, args),
        );
        if (!started) throw new HandlerNotStartedError(new UnstartedExecution(result));
        return atomic ? committedOrRolledBack(result) : result;
      },
    );
    if (!outcome.ok && !(outcome.error instanceof RolledBackExecution)) {
      // What `execute` itself threw (rare: graphql-js reports errors in the result).
      const thrown = [asGraphQLError(outcome.error)];
      return {
        result: responseKey === undefined ? { errors: thrown } : { data: { [responseKey]: null }, errors: thrown },
        replayed: outcome.replayed,
      };
    }
    const value = outcome.ok ? outcome.value : (outcome.error as RolledBackExecution).result;
    if (!outcome.replayed) return { result: value as ExecutionResult, replayed: false };
    const stored = value as StoredExecutionResult;
    return {
      result: fromStoredResult(responseKey === undefined ? stored : underResponseKey(stored, responseKey), source),
      replayed: true,
    };
  }

  /**
   * The field unit: root fields run one after another, each as an execution of its own, so that
   * each keyed field's result is stored (or replayed) on its own.
   */
  async function runFields(
    args: ExecutionArgs,
    execute: ExecuteFn,
    mutation: Mutation,
    keys: ReadonlyMap<string, string | undefined>,
    scopeOf: (operation: string) => string,
  ) {
    const { operation, fragments, variables, rootFields, rootTypeName } = mutation;
    const response = new FieldUnitResult(rootFields);
    for (const field of rootFields) {
      const { responseKey, fieldName, nodes, definition } = field;
      const fieldArgs: ExecutionArgs = { ...args, document: documentForField(args.document, operation, nodes) };
      const key = keys.get(responseKey);
      let outcome: FieldOutcome;
      try {
        if (key === undefined || !definition) {
          outcome = { ran: await executeOnce(execute, fieldArgs) };
        } else {
          const argumentValues = withoutKeyArgument(kit, getArgumentValues(definition, nodes[0]!, variables));
          const input: FingerprintInput = {
            unit: 'field',
            field: fieldName,
            arguments: argumentValues,
            ...effectiveSelection(nodes, fragments, variables),
          };
          const unit = await runUnit(
            scopeOf(`${rootTypeName}.${fieldName}`),
            key,
            input,
            fieldArgs,
            execute,
            1,
            responseKey,
          );
          outcome = { ran: unit.result, replayed: unit.replayed };
        }
      } catch (error) {
        if (error instanceof UnstartedExecution) outcome = { notStarted: error.result };
        else if (isIdempotencyError(error)) outcome = { refused: error };
        else throw error;
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
    onValidate({ addValidationRule }) {
      if (directive) addValidationRule(IdempotentDirectivePlacementRule);
    },
    onExecute({ args, executeFn, setExecuteFn }) {
      // Queries and subscriptions are not touched.
      if (getOperationAST(args.document, args.operationName)?.operation !== 'mutation') return;
      setExecuteFn((args: ExecutionArgs) => executeIdempotently(args, executeFn as ExecuteFn));
    },
  };
}

/** F1: a field's arguments without its key argument. */
function withoutKeyArgument(
  kit: Pick<AdapterKit<unknown>, 'key'>,
  values: Record<string, unknown>,
): Record<string, unknown> {
  const { field } = kit.key;
  if (field === false || !(field in values)) return values;
  const { [field]: _key, ...rest } = values;
  return rest;
}

async function executeOnce(execute: ExecuteFn, args: ExecutionArgs): Promise<ExecutionResult> {
  const result = await execute(args);
  if (isAsyncIterable(result))
    throw new TypeError('[idem] incremental delivery (@defer, @stream) is not supported on idempotent mutations');
  return result as ExecutionResult;
}
