/**
 * One unit of idempotency — the whole operation, or one root field of the field unit — run once
 * under its claim, or replayed (E1–E4). The unit reaches the resolvers through one channel: a
 * WeakMap keyed by the execution's context object. The wrapper of each root mutation field
 * (installed once per schema, in `onSchemaChange`, as `@envelop/on-resolve` does) finds its unit
 * there, puts the claim on the context for `idempotencyClaim(context)` — the claim of its part
 * (`claimForPart`) when the unit has several root fields — and notes whether the part started.
 * Root mutation fields run one after another and each completes before the next starts, so one
 * claim at a time sits on the context. A resolver that says `notStarted(context, error)` did not
 * start; when no root field of the unit started, the unit is answered unstored and its claim
 * released (E4).
 */
import { defaultFieldResolver, type ExecutionArgs, type ExecutionResult, type GraphQLSchema } from 'graphql';
import type { ClaimContext, ExecuteRequest } from '@idem/core';
import {
  attachClaim,
  claimForPart,
  finalFailure,
  notStartedAnswer,
  saidNotStarted,
  type AdapterKit,
} from '@idem/core/adapter';
import { isFinalResult, resultCodec, rolledBackResult, rootFieldFailed } from './result-codec.js';
import { asGraphQLError, fromStoredResult, underResponseKey } from './stored-result.js';
import type { OutcomeSerializer } from '@idem/core';

export type ExecuteFn = (args: ExecutionArgs) => unknown;

/** A unit while it runs: its claim, whether it has several parts, and whether one of them started. */
interface RunningUnit {
  readonly claim: ClaimContext;
  readonly parts: boolean;
  started: boolean;
}

/** The unit each execution context runs, while it runs. */
const runningUnits = new WeakMap<object, RunningUnit>();
const WRAPPED = Symbol.for('@idem/envelop/root-resolver');
const wrappedSchemas = new WeakSet<GraphQLSchema>();

/** Wraps the resolvers of `schema`'s root mutation fields, unless they already are. */
export function wrapRootResolvers(schema: GraphQLSchema): void {
  for (const field of Object.values(schema.getMutationType()?.getFields() ?? {})) {
    const resolve = field.resolve ?? defaultFieldResolver;
    if ((resolve as { [WRAPPED]?: true })[WRAPPED]) continue;
    field.resolve = Object.assign(
      (root: unknown, args: Record<string, unknown>, context: unknown, info: Parameters<typeof resolve>[3]) => {
        const unit = isObject(context) ? runningUnits.get(context) : undefined;
        if (!unit || !isObject(context)) return resolve(root, args, context, info);
        const claim = unit.parts ? claimForPart(unit.claim, String(info.path.key)) : unit.claim;
        attachClaim(context, claim);
        return runPart(unit, claim, () => resolve(root, args, context, info));
      },
      { [WRAPPED]: true as const },
    );
  }
  wrappedSchemas.add(schema);
}

/** E4: a part started unless its resolver said `notStarted` under its claim. */
async function runPart(unit: RunningUnit, claim: ClaimContext, resolve: () => unknown): Promise<unknown> {
  try {
    return await resolve();
  } finally {
    if (!saidNotStarted(claim)) unit.started = true;
  }
}

/**
 * What the plugin asks of one unit: the engine's request, how many root fields it has, the
 * response key of a field's unit, and whether its failures are resumed (E8: `onFailure: 'resume'`,
 * the request's or else the engine's).
 */
export interface UnitRequest extends Omit<ExecuteRequest, 'codec' | 'serializer' | 'errors' | 'statusOf'> {
  serializer: OutcomeSerializer;
  parts: number;
  responseKey?: string;
  resume: boolean;
}

/**
 * A unit's answer: its result, whether it was replayed (E2), whether it started (E4: nothing
 * stored), and whether it failed and left its key resumable (E8).
 */
export interface UnitAnswer {
  result: ExecutionResult;
  replayed: boolean;
  started: boolean;
  resumable: boolean;
}

/**
 * Runs `args` as one unit, or replays it. Refusals (409, 422, 503) are thrown. In atomic mode the
 * unit runs inside the store's transaction, and a root field that failed rolls the unit back, its
 * result still stored and replayed (E4).
 * @throws TypeError `[idem] …` when the schema never reached `onSchemaChange` (its resolvers
 *   cannot carry the claim), or the execution has no context object to carry it.
 */
export async function runUnit(
  kit: Pick<AdapterKit<unknown>, 'execute'>,
  atomic: boolean,
  args: ExecutionArgs,
  execute: ExecuteFn,
  { parts, responseKey, serializer, resume, ...request }: UnitRequest,
): Promise<UnitAnswer> {
  if (!wrappedSchemas.has(args.schema))
    throw new TypeError(
      '[idem] useIdempotency: this mutation runs on a schema the plugin never saw in onSchemaChange (Envelop `useSchema`, Yoga `schema`, Apollo Server `schema`); nothing was executed.',
    );
  const context = args.contextValue;
  if (!isObject(context))
    throw new TypeError(
      '[idem] useIdempotency: this mutation has no context object to carry its claim to the resolvers; nothing was executed.',
    );
  const source = args.document.loc?.source;
  const codec = resultCodec(serializer, source, { atomic, resume });
  const outcome = await kit.execute({ ...request, codec }, async (claim) => {
    const unit: RunningUnit = { claim, parts: parts > 1, started: false };
    runningUnits.set(context, unit);
    let result: ExecutionResult;
    try {
      result = await executeOnce(execute, args);
    } finally {
      runningUnits.delete(context);
      attachClaim(context, undefined);
    }
    if (!unit.started) return notStartedAnswer(result);
    const answer = atomic ? rolledBackResult(result) : result;
    // E8: a failure the client caused, or one thrown as `finalFailure(…)`, is stored and replayed.
    return resume && rootFieldFailed(result) && isFinalResult(result) ? finalFailure(answer) : answer;
  });
  if ('notStarted' in outcome) return { result: outcome.answer, replayed: false, started: false, resumable: false };
  const resumable = outcome.resumable === true;
  if (!outcome.ok) {
    // What `execute` itself threw (rare: graphql-js reports errors in the result).
    const thrown = [asGraphQLError(outcome.error)];
    const result = responseKey === undefined ? { errors: thrown } : { data: { [responseKey]: null }, errors: thrown };
    return { result, replayed: outcome.replayed, started: true, resumable };
  }
  if (!outcome.replayed) return { result: outcome.value, replayed: false, started: true, resumable };
  const stored = outcome.value;
  return {
    result: fromStoredResult(responseKey ? underResponseKey(stored, responseKey) : stored, source),
    replayed: true,
    started: true,
    resumable: false,
  };
}

async function executeOnce(execute: ExecuteFn, args: ExecutionArgs): Promise<ExecutionResult> {
  const result = await execute(args);
  if (isAsyncIterable(result))
    throw new TypeError('[idem] incremental delivery (@defer, @stream) is not supported on idempotent mutations');
  return result as ExecutionResult;
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof (value as { [Symbol.asyncIterator]?: unknown } | null)?.[Symbol.asyncIterator] === 'function';
}

function isObject(value: unknown): value is object {
  return (typeof value === 'object' && value !== null) || typeof value === 'function';
}
