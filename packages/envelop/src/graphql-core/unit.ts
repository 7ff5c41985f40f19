/**
 * One unit of idempotency — the whole operation, or one root field of the field unit — run once
 * under its claim, or replayed (E1–E4). The claim reaches the resolvers through the root value:
 * a unit's execution gets one that carries the unit, and the wrapper of each root mutation field
 * (installed once per schema, in `onSchemaChange`, as `@envelop/on-resolve` does) finds it in its
 * first argument, puts the claim on the context for `idempotencyClaim(context)` — the claim of
 * its part (`claimForPart`) when the unit has several root fields — notes that the unit started,
 * and calls the resolver with the application's own root value. Root mutation fields run one
 * after another and each completes before the next starts, so one claim at a time sits on the
 * context. A resolver that throws `HandlerNotStartedError` did not start; its cause is its error.
 */
import { defaultFieldResolver, type ExecutionArgs, type ExecutionResult, type GraphQLSchema } from 'graphql';
import { HandlerNotStartedError, type ErrorCodec, type ExecuteRequest } from '@idem/core';
import { attachClaim, claimForPart, type AdapterKit } from '@idem/core/adapter';
import type { ClaimContext } from '@idem/core';
import {
  asGraphQLError,
  fromStoredResult,
  graphqlErrorCodec,
  toStoredResult,
  underResponseKey,
  type StoredExecutionResult,
} from './stored-result.js';

export type ExecuteFn = (args: ExecutionArgs) => unknown;

/** A unit's execution in which no root field started: answered, not stored, its claim released (E4). */
export class UnstartedExecution extends Error {
  constructor(readonly result: ExecutionResult) {
    super('[idem] no root field of the unit started');
    this.name = 'UnstartedExecution';
  }
}

interface RunningUnit {
  claim: ClaimContext;
  parts: boolean;
  started: boolean;
  rootValue: unknown;
}

const UNIT = Symbol('@idem/envelop/unit');
const WRAPPED = Symbol.for('@idem/envelop/root-resolver');
const wrappedSchemas = new WeakSet<GraphQLSchema>();

/** Wraps the resolvers of `schema`'s root mutation fields, unless they already are. */
export function wrapRootResolvers(schema: GraphQLSchema): void {
  for (const field of Object.values(schema.getMutationType()?.getFields() ?? {})) {
    const resolve = field.resolve ?? defaultFieldResolver;
    if ((resolve as { [WRAPPED]?: true })[WRAPPED]) continue;
    field.resolve = Object.assign(
      (root: unknown, args: Record<string, unknown>, context: unknown, info: Parameters<typeof resolve>[3]) => {
        const unit = (root as { [UNIT]?: RunningUnit } | null | undefined)?.[UNIT];
        if (!unit) return resolve(root, args, context, info);
        if (isObject(context))
          attachClaim(context, unit.parts ? claimForPart(unit.claim, String(info.path.key)) : unit.claim);
        return runPart(unit, () => resolve(unit.rootValue, args, context, info));
      },
      { [WRAPPED]: true as const },
    );
  }
  wrappedSchemas.add(schema);
}

async function runPart(unit: RunningUnit, resolve: () => unknown): Promise<unknown> {
  try {
    const value = await resolve();
    unit.started = true;
    return value;
  } catch (error) {
    if (!(error instanceof HandlerNotStartedError)) unit.started = true;
    else throw error.cause instanceof Error ? error.cause : new Error(String(error.cause));
    throw error;
  }
}

/** What the plugin asks of one unit: the engine's request, how many root fields it has, and the response key of a field's unit. */
export interface UnitRequest extends Omit<ExecuteRequest, 'errors'> {
  parts: number;
  responseKey?: string;
}

/**
 * Runs `args` as one unit, or replays it. Refusals (409, 422, 503) are thrown, and so is an
 * {@link UnstartedExecution}. In atomic mode the unit runs inside the store's transaction, and a
 * root field that failed rolls the unit back, its result still stored and replayed (E4).
 * @throws TypeError `[idem] …` when the schema never reached `onSchemaChange` (its resolvers cannot carry the claim).
 */
export async function runUnit(
  kit: Pick<AdapterKit<unknown>, 'execute'>,
  atomic: boolean,
  args: ExecutionArgs,
  execute: ExecuteFn,
  { parts, responseKey, ...request }: UnitRequest,
): Promise<{ result: ExecutionResult; replayed: boolean }> {
  if (!wrappedSchemas.has(args.schema))
    throw new TypeError(
      '[idem] useIdempotency: this mutation runs on a schema the plugin never saw in onSchemaChange (Envelop `useSchema`, Yoga `schema`, Apollo Server `schema`); nothing was executed.',
    );
  const source = args.document.loc?.source;
  const errors = graphqlErrorCodec(source);
  const outcome = await kit.execute(
    { ...request, errors: atomic ? rolledBackCodec(errors) : errors },
    async (claim) => {
      const unit: RunningUnit = { claim, parts: parts > 1, started: false, rootValue: args.rootValue };
      const rootValue = Object.assign(Object.create(isObject(args.rootValue) ? args.rootValue : null) as object, {
        [UNIT]: unit,
      });
      let result: ExecutionResult;
      try {
        result = await executeOnce(execute, { ...args, rootValue });
      } finally {
        if (isObject(args.contextValue)) attachClaim(args.contextValue, undefined);
      }
      if (!unit.started) throw new HandlerNotStartedError(new UnstartedExecution(result));
      return atomic ? committedOrRolledBack(result) : result;
    },
  );
  if (!outcome.ok && !(outcome.error instanceof RolledBackExecution)) {
    // What `execute` itself threw (rare: graphql-js reports errors in the result).
    const thrown = [asGraphQLError(outcome.error)];
    const result = responseKey === undefined ? { errors: thrown } : { data: { [responseKey]: null }, errors: thrown };
    return { result, replayed: outcome.replayed };
  }
  const value = outcome.ok ? outcome.value : (outcome.error as RolledBackExecution).result;
  if (!outcome.replayed) return { result: value as ExecutionResult, replayed: false };
  const stored = value as StoredExecutionResult;
  return {
    result: fromStoredResult(responseKey ? underResponseKey(stored, responseKey) : stored, source),
    replayed: true,
  };
}

async function executeOnce(execute: ExecuteFn, args: ExecutionArgs): Promise<ExecutionResult> {
  const result = await execute(args);
  if (isAsyncIterable(result))
    throw new TypeError('[idem] incremental delivery (@defer, @stream) is not supported on idempotent mutations');
  return result as ExecutionResult;
}

/**
 * Atomic mode: a result in which a root field failed — an error left it null (a resolver threw,
 * or a null propagated up to it), or `data` is null altogether — is thrown as this, so that the
 * unit's writes are rolled back; it is stored and replayed as the same result (live, an
 * `ExecutionResult`; revived, a {@link StoredExecutionResult}). Errors below a root field that
 * still resolved do not undo it. A rolled-back unit reports no root field as done.
 */
class RolledBackExecution extends Error {
  constructor(readonly result: ExecutionResult | StoredExecutionResult) {
    super('[idem] a root field failed: the unit was rolled back, its result is stored');
    this.name = 'RolledBackExecution';
  }
}

function committedOrRolledBack(result: ExecutionResult): ExecutionResult {
  const { data, errors } = result;
  if (!errors?.length) return result;
  const failed = !data || errors.some((error) => error.path?.[0] === undefined || data[error.path[0]] === null);
  if (!failed) return result;
  const reportsDone = data != null && Object.values(data).some((value) => value !== null);
  throw new RolledBackExecution(reportsDone ? { ...result, data: null } : result);
}

const ROLLED_BACK = 'IdempotencyRolledBackExecution';

/** A {@link RolledBackExecution} is stored whole, under the status and code of its first error. */
function rolledBackCodec(inner: ErrorCodec): ErrorCodec {
  return {
    describe(error) {
      if (!(error instanceof RolledBackExecution)) return inner.describe(error);
      const result = error.result as ExecutionResult;
      return { ...inner.describe(result.errors?.[0] ?? error), name: ROLLED_BACK, data: toStoredResult(result) };
    },
    revive: (description) =>
      description.name === ROLLED_BACK
        ? new RolledBackExecution(description.data as StoredExecutionResult)
        : inner.revive(description),
  };
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof (value as { [Symbol.asyncIterator]?: unknown } | null)?.[Symbol.asyncIterator] === 'function';
}

function isObject(value: unknown): value is object {
  return (typeof value === 'object' && value !== null) || typeof value === 'function';
}
