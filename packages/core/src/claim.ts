/**
 * The claim a handler runs under, and how a request context carries it to the resolvers
 * (`idempotencyClaim(ctx)`): one symbol, one shape, for every adapter.
 */
import { createHash } from 'node:crypto';
import { formatIdempotencyKey } from './key.js';

/** What the handler is told about its claim. `TTx` is the store's transaction type (atomic mode). */
export interface ClaimContext<TTx = unknown> {
  scope: string;
  key: string;
  generation: number;
  /**
   * E8: which execution of this generation this is: 1 for the first, + 1 for each takeover (E6)
   * and each resume of a resumable failure (`onFailure: 'resume'`).
   */
  attempt: number;
  /** The fencing token of this execution (E6). */
  token: string;
  /**
   * E6: aborts, with a `LeaseLostError` as its reason, when this execution lost its claim: a
   * renewal of its lease found it taken over, or the store was unreachable for longer than the
   * lease. Pass it to your own `fetch` and database calls. Its completion is refused (fenced)
   * either way once another execution took the claim over. Never aborts in atomic mode, where the
   * open transaction holds the claim.
   */
  signal: AbortSignal;
  /**
   * A key for an outgoing call (a payment channel, another idempotent API), formatted as an
   * RFC 9651 sf-string (`"idem-…"`), ready for an `Idempotency-Key` header. Deterministic in
   * (scope, key, generation, label): a re-execution after a lease takeover (E6) sends the same
   * downstream key, so the provider deduplicates; a reuse after expiry (R2, a new generation)
   * gets a new one, as it is a new request. In a unit of several parts (see {@link part}) it
   * is also distinct for each part.
   */
  deriveKey(label: string): string;
  /**
   * E4: the part of a unit of several parts this handler runs — with a GraphQL header key over
   * several root fields, the root field's response key (alias or name). Keys derived from the
   * claim differ per part, so a downstream provider never deduplicates one part onto another.
   * Undefined when the unit is one part.
   */
  part?: string;
  /**
   * Atomic mode (`executeAtomic`, the adapters' `atomic: true`): the store's database transaction
   * (with `@idem/drizzle`, the Drizzle transaction, typed). Write through it, and your writes
   * commit with the claim and the stored outcome, or not at all. Undefined otherwise.
   */
  tx?: TTx;
  /**
   * E8, a recovery point: runs `run` to completion at most once per record and generation, and
   * stores its result with the record (serialized like outcomes, all steps together bounded by
   * `maxStoredBytes`). Every later attempt of the generation — a resume of a resumable failure
   * (`onFailure: 'resume'`), a takeover after a crash (E6), in either mode — gets the stored result
   * back without `run` being called. `run` is given the step's own downstream key,
   * `claim.deriveKey(name)`: pass it to the provider the step calls.
   *
   * Outside atomic mode the result is written right after `run` returns: a crash in between
   * loses it, and the step runs again with the same step key, so the downstream must deduplicate
   * by that key. In atomic mode `run` writes through `claim.tx`, and its writes commit together
   * with its stored result (a failure later in the handler rolls back to this point only).
   *
   * `name`: non-empty, at most 200 characters, unique per handler.
   * @throws StepResultTooLargeError when the stored steps would exceed `maxStoredBytes`.
   * @throws LeaseLostError when the claim was taken over before the result was stored (E6).
   */
  step<T>(name: string, run: (stepKey: string) => Promise<T> | T): Promise<T>;
}

/** The key under which a request context carries its claim. */
export const IDEMPOTENCY_CLAIM: unique symbol = Symbol.for('@idem/claim');

/** A context that may carry a claim: what an adapter adds to the type of the context it hands on. */
export interface ClaimCarrier<TTx = unknown> {
  readonly [IDEMPOTENCY_CLAIM]?: ClaimContext<TTx> | undefined;
}

/**
 * The claim a request context carries while its handler runs, e.g.
 * `idempotencyClaim(ctx)?.deriveKey('channel')`, or in atomic mode `idempotencyClaim(ctx)?.tx`.
 * Undefined outside an idempotent execution (no key, or a query). Where the context's type says
 * it carries a claim (a tRPC procedure after the middleware), the transaction keeps its type.
 */
export function idempotencyClaim<TTx>(context: ClaimCarrier<TTx>): ClaimContext<TTx> | undefined;
export function idempotencyClaim(context: unknown): ClaimContext | undefined;
export function idempotencyClaim(context: unknown): ClaimContext | undefined {
  return context !== null && typeof context === 'object'
    ? ((context as ClaimCarrier)[IDEMPOTENCY_CLAIM] ?? undefined)
    : undefined;
}

/** See {@link ClaimContext.deriveKey}. */
export function deriveKey(
  claim: { scope: string; key: string; generation: number; part?: string | undefined },
  label: string,
): string {
  const parts = [claim.scope, claim.key, claim.generation, label];
  if (claim.part !== undefined) parts.push(claim.part);
  const digest = createHash('sha256').update(JSON.stringify(parts)).digest('base64url');
  return formatIdempotencyKey(`idem-${digest.slice(0, 32)}`);
}

/**
 * E4: the claim as one part of a unit of several parts sees it (an adapter attaches it while
 * that part runs): the same claim and transaction, with keys derived for this part only.
 */
export function claimForPart<TTx>(claim: ClaimContext<TTx>, part: string): ClaimContext<TTx> {
  const { scope, key, generation } = claim;
  const partKey = (label: string) => deriveKey({ scope, key, generation, part }, label);
  // E8: steps of one part are stored apart from another part's: `part:name` (a part has no colon).
  const step: ClaimContext<TTx>['step'] = (name, run) => claim.step(`${part}:${name}`, () => run(partKey(name)));
  return { ...claim, part, deriveKey: partKey, step };
}
