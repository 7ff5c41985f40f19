import {
  getArgumentValues,
  getOperationAST,
  getVariableValues,
  GraphQLError,
  isNonNullType,
  type DocumentNode,
  type ExecutionArgs,
  type ExecutionResult,
  type FragmentDefinitionNode,
  type GraphQLObjectType,
  type GraphQLSchema,
  type OperationDefinitionNode,
} from 'graphql';
import { isAsyncIterable, type Plugin } from '@envelop/core';
import {
  AmbiguousKeyError,
  batchedHeaderKeyError,
  computeFingerprint,
  createAdapterEngine,
  attachClaim,
  claimForPart,
  type ClaimContext,
  formatScope,
  HandlerNotStartedError,
  isIdempotencyError,
  parseIdempotencyKey,
  requestUrlOf,
  resolveDocumentationUrl,
  type ErrorCodec,
  type ExecuteRequest,
  type IdempotencyEngine,
  type IdempotencyError,
} from '@idem/core';
import { IdempotentDirectivePlacementRule } from './directive-placement-rule.js';
import { IDEMPOTENT_DIRECTIVE_NAME } from './directive.js';
import { idempotencyGraphQLError } from './error-mapping.js';
import { planKeys } from './key-plan.js';
import { documentForField, effectiveSelection, fragmentsOf, normalizedOperation } from './normalized-document.js';
import { DEFAULT_KEY_ARGUMENT, type FingerprintInput, type IdempotencyOptions } from './options.js';
import { headersOf, idempotencyKeyHeader, requestOf } from './request-headers.js';
import { collectRootFields, type RootField } from './root-fields.js';
import { asGraphQLError, fromStoredResult, graphqlErrorCodec, storedResultSerializer, toStoredResult, type StoredExecutionResult } from './stored-result.js';

/**
 * `extensions.idempotency` of a response that contains replayed outcomes (E2).
 * Operation unit: `{ replayed: true }`. Field unit: `replayedFields` lists the response keys
 * (aliases or field names) whose stored outcome was replayed; `replayed` is true only when every
 * root field was replayed, i.e. nothing executed for this response.
 */
export interface IdempotencyResultExtension {
  replayed: boolean;
  replayedFields?: string[];
}

/** What a host layer (the Yoga plugin) tells the Envelop plugin about the HTTP request. */
export interface HostIntegration {
  /** How many mutation operations share this context's HTTP request (a Yoga batch); undefined when it is not a batch. */
  batchedMutations?(context: unknown): number | undefined;
}

type ExecuteFn = (args: ExecutionArgs) => unknown;

/** Marks a result whose execution never reached a resolver (variable coercion failed): not stored (E4). */
class UnstartedExecution {
  constructor(readonly result: ExecutionResult) {}
}

/**
 * Atomic mode: a result in which a root field failed, thrown so that the unit's writes are rolled
 * back. It is stored as the outcome (E4) and replayed as the same result: live, an
 * `ExecutionResult`; revived from the store, a {@link StoredExecutionResult}.
 */
class RolledBackExecution {
  constructor(readonly result: ExecutionResult | StoredExecutionResult) {}
}

const ROLLED_BACK = 'IdempotencyRolledBackExecution';

/**
 * Idempotent GraphQL mutations as a plain Envelop plugin (SPEC K, S, F, E, X3). Queries and
 * subscriptions pass through. Errors are GraphQLErrors with `extensions.code` and
 * `extensions.http`, so it works in any Envelop host; with GraphQL Yoga use
 * {@link useYogaIdempotency}, which adds the `Idempotent-Replayed` header and the batching rule.
 *
 * - `Idempotency-Key` header → the mutation operation is one record;
 * - `idempotencyKey` argument or `@idempotent(key:)` → each keyed root field is its own record.
 */
export function useIdempotency<TContext extends Record<string, any> = Record<string, any>>(options: IdempotencyOptions<TContext>): IdempotencyPlugin<TContext> {
  return createIdempotencyPlugin(options, {});
}

/** The Envelop plugin, with the engine it runs on: `engine.drain()` on shutdown waits for outcome writes being retried (E7). */
export type IdempotencyPlugin<TContext extends Record<string, any>> = Plugin<TContext> & { readonly engine: IdempotencyEngine };

export function createIdempotencyPlugin<TContext extends Record<string, any>>(options: IdempotencyOptions<TContext>, host: HostIntegration): IdempotencyPlugin<TContext> {
  const {
    principal,
    header = true,
    getHeaders = headersOf,
    argument = DEFAULT_KEY_ARGUMENT,
    directive = true,
    required = false,
    fingerprint = 'default',
    serializer = JSON,
    atomic = false,
  } = options;
  const engine = createAdapterEngine({ ...options, serializer }, 'useIdempotency');
  const { documentationUrl } = engine.policy;
  const resultSerializer = storedResultSerializer(serializer);
  /** HTTP requests whose `Idempotency-Key` header a mutation operation already took. */
  const headerTaken = new WeakSet<object>();

  /** K2/R4: the documentation URL, absolute for the HTTP request of `context` (problem types). */
  const documentationFor = (context: unknown) => resolveDocumentationUrl(documentationUrl, requestUrlOf(requestOf(context)));

  const refuse = (error: IdempotencyError, context: unknown, operation?: OperationDefinitionNode): ExecutionResult => ({
    errors: [idempotencyGraphQLError(error, { documentationUrl: documentationFor(context), ...(operation ? { nodes: [operation] } : {}) })],
  });

  /**
   * Batching rule: one header key covers one mutation operation. In a Yoga batch with several
   * mutation operations every one of them is refused (the Yoga layer counts them up front);
   * without the Yoga layer, a second operation of the same request taking the header is refused.
   */
  const takeHeader = (context: unknown) => {
    const batched = host.batchedMutations?.(context);
    if (batched !== undefined && batched > 1) {
      throw batchedHeaderKeyError(batched, 'Send each mutation in its own request, or put keys in arguments.');
    }
    const request = requestOf(context);
    if (!request) return;
    if (headerTaken.has(request)) {
      throw new AmbiguousKeyError('Another mutation operation of this request already used its Idempotency-Key header; one header key covers one operation. Put keys in arguments instead.');
    }
    headerTaken.add(request);
  };

  const executeStarted = async (execute: ExecuteFn, args: ExecutionArgs): Promise<ExecutionResult> => {
    const result = await executeOnce(execute, args);
    // A resolver refused before any side effect (`throw new HandlerNotStartedError(cause)`): when
    // no root field produced a value, the claim is released and nothing is stored (E4).
    const unwrapped: ExecutionResult = result.errors?.some(isNotStarted) ? { ...result, errors: result.errors.map(unwrapNotStarted) } : result;
    if (!started(result)) throw new HandlerNotStartedError(new UnstartedExecution(unwrapped));
    return unwrapped;
  };

  /**
   * E4, an operation unit of several root fields: each field runs as an execution of its own, one
   * after another as graphql-js would run them, with the claim of its part attached
   * (`claimForPart`, keys derived per response key). Once any part started, the unit's outcome
   * is stored; only when none did is the claim released.
   */
  const executeParts = async (claim: ClaimContext, execute: ExecuteFn, args: ExecutionArgs, mutation: Mutation): Promise<ExecutionResult> => {
    const errors: GraphQLError[] = [];
    const extensions: Record<string, unknown> = {};
    let data: Record<string, unknown> | null = {};
    let anyStarted = false;
    for (const { responseKey, nodes, definition } of mutation.rootFields) {
      const partArgs: ExecutionArgs = { ...args, document: documentForField(args.document, mutation.operation, nodes) };
      const slice = await withClaim(args.contextValue, claimForPart(claim, responseKey), () => executeOnce(execute, partArgs));
      // `__typename` has no resolver of its own: it never counts as a start.
      anyStarted ||= definition !== undefined && started(slice);
      if (slice.errors) errors.push(...slice.errors.map(unwrapNotStarted));
      if (slice.extensions) Object.assign(extensions, slice.extensions);
      // A null in a non-null root field nulls the whole `data` and stops the operation, as graphql-js does.
      if (!slice.data) {
        data = null;
        break;
      }
      data[responseKey] = slice.data[responseKey] ?? null;
    }
    const result: ExecutionResult = errors.length > 0 ? { errors, data } : { data };
    if (Object.keys(extensions).length > 0) result.extensions = extensions;
    if (!anyStarted) throw new HandlerNotStartedError(new UnstartedExecution(result));
    return result;
  };

  /** Root fields run one after another, so one claim at a time sits on the context (`idempotencyClaim(context)`). */
  const executeClaimed = async (claim: ClaimContext, execute: ExecuteFn, args: ExecutionArgs, mutation?: Mutation): Promise<ExecutionResult> => {
    const result =
      mutation && mutation.rootFields.length > 1
        ? await executeParts(claim, execute, args, mutation)
        : await withClaim(args.contextValue, claim, () => executeStarted(execute, args));
    if (atomic && rootFieldFailed(result)) throw new RolledBackExecution(rolledBack(result));
    return result;
  };

  const endpoint = (scope: string, key: string, fingerprintValue: string | null, document: DocumentNode): ExecuteRequest => {
    const errors = graphqlErrorCodec(document.loc?.source);
    return { scope, key, fingerprint: fingerprintValue, serializer: resultSerializer, errors: atomic ? rolledBackCodec(errors) : errors };
  };

  /** One unit of idempotency; in atomic mode inside the store's transaction (the claim carries `tx`). */
  const executeUnit = (request: ExecuteRequest, run: (claim: ClaimContext) => Promise<ExecutionResult>) =>
    atomic ? engine.executeAtomic(request, (_tx, claim) => run(claim)) : engine.execute(request, run);

  async function runOperation(args: ExecutionArgs, execute: ExecuteFn, mutation: Mutation, key: string, principalId: string): Promise<ExecutionResult> {
    const { operation, fragments, variables, rootFields } = mutation;
    const names = [...new Set(rootFields.filter((field) => field.definition).map((field) => field.fieldName))].sort();
    const scope = formatScope(`mutation:${names.join(',')}`, principalId);
    const input: FingerprintInput = { unit: 'operation', document: normalizedOperation(operation, fragments), variables };
    const source = args.document.loc?.source;
    try {
      const outcome = await executeUnit(endpoint(scope, key, await computeFingerprint(input, fingerprint), args.document), (claim) => executeClaimed(claim, execute, args, mutation));
      const result: ExecutionResult = !outcome.ok
        ? outcome.error instanceof RolledBackExecution
          ? outcome.replayed
            ? fromStoredResult(outcome.error.result as StoredExecutionResult, source)
            : (outcome.error.result as ExecutionResult)
          : { errors: [asGraphQLError(outcome.error)] }
        : outcome.replayed
          ? fromStoredResult(outcome.value as StoredExecutionResult, source)
          : (outcome.value as ExecutionResult);
      return outcome.replayed ? withIdempotencyExtension(result, { replayed: true }) : result;
    } catch (error) {
      if (error instanceof UnstartedExecution) return error.result;
      if (isIdempotencyError(error)) return refuse(error, args.contextValue, operation);
      throw error;
    }
  }

  async function runFields(args: ExecutionArgs, execute: ExecuteFn, mutation: Mutation, keys: ReadonlyMap<string, string | undefined>, principalId: string): Promise<ExecutionResult> {
    const { operation, fragments, variables, rootFields, rootType } = mutation;
    const source = args.document.loc?.source;
    type Refusal = { refusal: IdempotencyError; field: RootField };
    const errors: Array<GraphQLError | Refusal> = [];
    const extensions: Record<string, unknown> = {};
    const replayedFields: string[] = [];
    let data: Record<string, unknown> | null = {};
    let ran = 0;

    // Root mutation fields run one after another (GraphQL spec, "Normal and Serial Execution"):
    // each one here as an operation of its own, so that its outcome can be stored on its own.
    for (const field of rootFields) {
      const { responseKey, fieldName, nodes, definition } = field;
      const fieldArgs: ExecutionArgs = { ...args, document: documentForField(args.document, operation, nodes) };
      const key = keys.get(responseKey);
      let slice: ExecutionResult;
      let refused = false;
      if (key === undefined || !definition) {
        slice = await executeOnce(execute, fieldArgs);
        ran++;
      } else {
        try {
          const argumentValues = getArgumentValues(definition, nodes[0]!, variables);
          if (argument !== false) delete argumentValues[argument];
          const input: FingerprintInput = { unit: 'field', field: fieldName, arguments: argumentValues, ...effectiveSelection(nodes, fragments, variables) };
          const scope = formatScope(`${rootType.name}.${fieldName}`, principalId);
          const outcome = await executeUnit(endpoint(scope, key, await computeFingerprint(input, fingerprint), args.document), (claim) => executeClaimed(claim, execute, fieldArgs));
          ran++;
          if (outcome.replayed) replayedFields.push(responseKey);
          slice = !outcome.ok
            ? outcome.error instanceof RolledBackExecution
              ? outcome.replayed
                ? fromStoredResult(underResponseKey(outcome.error.result as StoredExecutionResult, responseKey), source)
                : (outcome.error.result as ExecutionResult)
              : { data: { [responseKey]: null }, errors: [asGraphQLError(outcome.error)] }
            : outcome.replayed
              ? fromStoredResult(underResponseKey(outcome.value as StoredExecutionResult, responseKey), source)
              : (outcome.value as ExecutionResult);
        } catch (error) {
          if (error instanceof UnstartedExecution) {
            slice = { data: error.result.data ?? null, ...(error.result.errors ? { errors: error.result.errors } : {}) };
          } else if (isIdempotencyError(error)) {
            errors.push({ refusal: error, field });
            slice = { data: { [responseKey]: null } };
            refused = true;
          } else {
            throw error;
          }
        }
      }
      if (slice.errors) errors.push(...slice.errors);
      if (slice.extensions) Object.assign(extensions, slice.extensions);
      // A null in a non-null root field nulls the whole `data` and stops the operation, as graphql-js does.
      if (!slice.data || (refused && definition && isNonNullType(definition.type))) {
        data = null;
        break;
      }
      data[responseKey] = slice.data[responseKey] ?? null;
    }

    // Field-level conflicts: when no root field ran, the refusals are the response (400/409/422/503
    // with Retry-After); when some ran, the response is 200 and each refusal is its field's error.
    const wholeOperationRefused = ran === 0;
    const result: ExecutionResult = {};
    if (errors.length > 0) {
      result.errors = errors.map((entry) =>
        entry instanceof GraphQLError
          ? entry
          : idempotencyGraphQLError(entry.refusal, { documentationUrl: documentationFor(args.contextValue), nodes: entry.field.nodes, path: [entry.field.responseKey], http: wholeOperationRefused }),
      );
    }
    result.data = data;
    if (replayedFields.length > 0) {
      const keyed = rootFields.filter((field) => field.definition).length;
      extensions['idempotency'] = { replayed: replayedFields.length === keyed, replayedFields } satisfies IdempotencyResultExtension;
    }
    if (Object.keys(extensions).length > 0) result.extensions = extensions;
    return result;
  }

  async function executeIdempotently(args: ExecutionArgs, execute: ExecuteFn): Promise<unknown> {
    const schema = args.schema as GraphQLSchema;
    const operation = getOperationAST(args.document, args.operationName);
    const rootType = schema.getMutationType();
    if (!operation || operation.operation !== 'mutation' || !rootType) return execute(args);
    const coerced = getVariableValues(schema, operation.variableDefinitions ?? [], (args.variableValues ?? {}) as Record<string, unknown>);
    // Unusable variables: graphql-js reports them and runs nothing; there is nothing to claim.
    if (coerced.errors) return execute(args);
    const fragments = fragmentsOf(args.document);
    const rootFields = collectRootFields(schema, rootType, operation.selectionSet, fragments, coerced.coerced);
    const mutation: Mutation = { operation, fragments, variables: coerced.coerced, rootFields, rootType };
    const context = args.contextValue as TContext;

    let plan;
    try {
      const headerKey = header ? parseIdempotencyKey(idempotencyKeyHeader(getHeaders(context))) : undefined;
      if (headerKey !== undefined) takeHeader(context);
      plan = planKeys(rootFields, {
        headerEnabled: header,
        header: headerKey,
        argument,
        directive: directive ? (schema.getDirective(IDEMPOTENT_DIRECTIVE_NAME) ?? undefined) : undefined,
        required,
        variables: coerced.coerced,
        rootTypeName: rootType.name,
      });
    } catch (error) {
      if (isIdempotencyError(error)) return refuse(error, args.contextValue, operation);
      // An argument that does not coerce: execution reports it where it belongs.
      if (error instanceof GraphQLError) return execute(args);
      throw error;
    }
    if (plan.unit === 'none') return execute(args);

    let principalId: string;
    try {
      principalId = await principal(context);
    } catch (error) {
      // Authentication failed before anything ran: nothing claimed, nothing stored (E4).
      return { errors: [asGraphQLError(error)] };
    }
    if (plan.unit === 'operation') return runOperation(args, execute, mutation, plan.key, principalId);
    return runFields(args, execute, mutation, plan.keys, principalId);
  }

  return {
    engine,
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

interface Mutation {
  operation: OperationDefinitionNode;
  fragments: ReadonlyMap<string, FragmentDefinitionNode>;
  variables: Record<string, unknown>;
  rootFields: RootField[];
  rootType: GraphQLObjectType;
}

/**
 * Atomic mode: whether a root field of the unit failed — an error under it left it null (a
 * resolver threw, or a null propagated up to it), or `data` is null altogether. Errors below a
 * root field that still resolved do not undo the mutation.
 */
function rootFieldFailed(result: ExecutionResult): boolean {
  if (!result.errors?.length) return false;
  const data = result.data;
  if (!data) return true;
  return result.errors.some((error) => {
    const root = error.path?.[0];
    return root === undefined || data[root] === null;
  });
}

/** What the client of a rolled-back unit gets: its errors, and no root field reported as done. */
function rolledBack(result: ExecutionResult): ExecutionResult {
  const reportsDone = result.data != null && Object.values(result.data).some((value) => value !== null);
  return reportsDone ? { ...result, data: null } : result;
}

/** Atomic mode: a {@link RolledBackExecution} is stored whole, under the status and code of its first error. */
function rolledBackCodec(inner: ErrorCodec): ErrorCodec {
  return {
    describe(error) {
      if (!(error instanceof RolledBackExecution)) return inner.describe(error);
      const result = error.result as ExecutionResult;
      const first = result.errors?.[0];
      return { ...inner.describe(first ?? error), name: ROLLED_BACK, data: toStoredResult(result) };
    },
    revive: (description) => (description.name === ROLLED_BACK ? new RolledBackExecution(description.data as StoredExecutionResult) : inner.revive(description)),
  };
}

/** A field's stored slice, under the response key of this request (a retry may use another alias). */
function underResponseKey(stored: StoredExecutionResult, responseKey: string): StoredExecutionResult {
  const moved: StoredExecutionResult = {};
  if (stored.data !== undefined) moved.data = stored.data === null ? null : { [responseKey]: Object.values(stored.data)[0] ?? null };
  if (stored.errors) moved.errors = stored.errors.map((error) => (error.path?.length ? { ...error, path: [responseKey, ...error.path.slice(1)] } : error));
  return moved;
}

function withIdempotencyExtension(result: ExecutionResult, extension: IdempotencyResultExtension): ExecutionResult {
  return { ...result, extensions: { ...result.extensions, idempotency: extension } };
}

async function executeOnce(execute: ExecuteFn, args: ExecutionArgs): Promise<ExecutionResult> {
  const result = await execute(args);
  if (isAsyncIterable(result)) throw new TypeError('[idem] incremental delivery (@defer, @stream) is not supported on idempotent mutations');
  return result as ExecutionResult;
}

/** Runs `run` with `claim` attached to the context, where `idempotencyClaim(context)` finds it. */
async function withClaim<T>(context: unknown, claim: ClaimContext, run: () => Promise<T>): Promise<T> {
  const detach = context !== null && typeof context === 'object' ? attachClaim(context, claim) : () => {};
  try {
    return await run();
  } finally {
    detach();
  }
}

/**
 * Whether an execution started (E4): it reached the resolvers, and did not stop at a
 * `HandlerNotStartedError` with no root field producing a value.
 */
function started(result: ExecutionResult): boolean {
  if (result.data === undefined) return false;
  if (!result.errors?.some(isNotStarted)) return true;
  return result.data !== null && Object.values(result.data).some((value) => value !== null);
}

function isNotStarted(error: GraphQLError): boolean {
  return error.originalError instanceof HandlerNotStartedError;
}

/** The error the resolver wrapped in `HandlerNotStartedError`, where graphql-js reported the wrapper. */
function unwrapNotStarted(error: GraphQLError): GraphQLError {
  if (!(error.originalError instanceof HandlerNotStartedError)) return error;
  const cause = error.originalError.cause;
  const original = cause instanceof Error ? cause : new Error(String(cause));
  return new GraphQLError(original.message, {
    ...(error.nodes ? { nodes: error.nodes } : {}),
    ...(error.path ? { path: error.path } : {}),
    originalError: original,
    ...(cause instanceof GraphQLError ? { extensions: cause.extensions } : {}),
  });
}
