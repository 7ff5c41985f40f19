/**
 * How the claim of a unit reaches its resolvers, and how the plugin learns that a unit started
 * (E4): the resolvers of the schema's root mutation fields are wrapped, once per schema. When a
 * root field of a running unit starts, the wrapper puts the unit's claim on the context — the
 * claim of its part when the unit has several root fields (`claimForPart`) — where
 * `idempotencyClaim(context)` finds it; a root resolver that throws `HandlerNotStartedError` did
 * not start, and its cause is what the client sees.
 *
 * Root mutation fields run one after another (GraphQL spec, "Normal and Serial Execution"), and
 * everything below a root field completes before the next one starts: one claim at a time sits
 * on the context, and its nested resolvers see it too.
 */
import { defaultFieldResolver, type GraphQLFieldResolver, type GraphQLSchema } from 'graphql';
import { HandlerNotStartedError, type ClaimContext } from '@idem/core';
import { attachClaim, claimForPart } from '@idem/core/adapter';

interface RunningUnit {
  claim: ClaimContext;
  /** Whether the unit has several root fields, each a part with keys derived for it. */
  parts: boolean;
  started: boolean;
}

/** Units running now, by the context object of their execution. */
const running = new WeakMap<object, RunningUnit>();
const WRAPPED = Symbol('@idem/envelop/root-resolver');

/** Wraps the resolvers of `schema`'s root mutation fields, unless they already are. */
export function wrapRootResolvers(schema: GraphQLSchema): void {
  for (const field of Object.values(schema.getMutationType()?.getFields() ?? {})) {
    const resolve: GraphQLFieldResolver<unknown, unknown> & { [WRAPPED]?: true } =
      field.resolve ?? defaultFieldResolver;
    if (resolve[WRAPPED]) continue;
    const wrapper: GraphQLFieldResolver<unknown, unknown> = (source, args, context, info) =>
      enterRootField(context, String(info.path.key), () => resolve(source, args, context, info));
    field.resolve = Object.assign(wrapper, { [WRAPPED]: true as const });
  }
}

/**
 * Runs `execute` (one execution of a unit's document) under `claim`, and tells whether any of
 * its root fields started. `parts`: how many root fields the unit has.
 */
export async function runUnderClaim<T>(
  context: unknown,
  claim: ClaimContext,
  parts: number,
  execute: () => Promise<T>,
): Promise<{ result: T; started: boolean }> {
  // Without a context object there is nowhere to put the claim, nor a way to tell: it started.
  if (context === null || typeof context !== 'object') return { result: await execute(), started: true };
  const unit: RunningUnit = { claim, parts: parts > 1, started: false };
  running.set(context, unit);
  try {
    return { result: await execute(), started: unit.started };
  } finally {
    running.delete(context);
    attachClaim(context, undefined);
  }
}

function enterRootField(context: unknown, responseKey: string, resolve: () => unknown): unknown {
  const unit = context !== null && typeof context === 'object' ? running.get(context) : undefined;
  if (!unit) return resolve();
  attachClaim(context as object, unit.parts ? claimForPart(unit.claim, responseKey) : unit.claim);
  const failed = (error: unknown): never => {
    if (error instanceof HandlerNotStartedError)
      throw error.cause instanceof Error ? error.cause : new Error(String(error.cause));
    unit.started = true;
    throw error;
  };
  let value: unknown;
  try {
    value = resolve();
  } catch (error) {
    return failed(error);
  }
  if (!isPromiseLike(value)) {
    unit.started = true;
    return value;
  }
  return value.then((resolved) => {
    unit.started = true;
    return resolved;
  }, failed);
}

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}
