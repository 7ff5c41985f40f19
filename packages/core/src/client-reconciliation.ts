/**
 * Client side: what a key's status lookup says (A1, R2), as a reconciliation a caller acts on,
 * and the operations a client left unresolved. Free of Node.js APIs, as the rest of `@idem/core/client`.
 */

/**
 * What a key's status lookup says of one generation of a key (the server's `KeyStatus`), as it
 * travels: timestamps as ISO 8601 strings.
 *
 * - `processing`: claimed, the handler may be running (or its owner died: see the lease, E6);
 * - `completed`: an outcome is stored; replayed while `replayable`;
 * - `expired`: completed, but its retention has passed: the key would now run as new (R2);
 * - `released`: the claim was given back before the handler started: nothing ran (E4);
 * - `archived`: retention passed and the record was archived (R3); `status` says how it ended;
 * - `resumable` (E8, `onFailure: 'resume'`): an attempt failed after it started; a retry with the
 *   same key and payload completes the work (the steps done are not repeated).
 */
export type KeyGenerationState = 'processing' | 'completed' | 'expired' | 'released' | 'archived' | 'resumable';

/** One generation of a key, as the status lookup answers it (A1, for the caller's own keys). */
export interface KeyGenerationStatus {
  /** 1 for the first use of the key; +1 for each reuse after its retention (R2). */
  generation: number;
  /** The operation the record belongs to (a tRPC path, `Mutation.<field>`, `mutation:<fields>`). */
  operation: string;
  state: KeyGenerationState;
  /** When the server first saw this generation. */
  firstSeenAt: string;
  /** When its outcome was stored; `null` while none is. */
  completedAt: string | null;
  /** The end of its retention (R1): completion plus the endpoint's retention. */
  expiresAt: string;
  archivedAt: string | null;
  /** When a later generation replaced this one (the key was used again after its retention). */
  reusedAt: string | null;
  /** The outcome's HTTP-equivalent status (200, 500, …); `null` when none was stored. */
  status: number | null;
  outcomeKind: 'success' | 'error' | null;
  /** How many duplicates waited for this generation's outcome instead of answering 409 (E3w). */
  waits: number;
  /** E8: the generation's mode: a failure `'replay'`ed (Stripe v1) or `'resume'`d on retry (Stripe v2). Absent reads as `'replay'`. */
  onFailure?: 'replay' | 'resume';
  /** E8: how many executions of the generation started (takeovers and resumes included). */
  attempts?: number;
  /** E8: the names of the steps (`claim.step`) it completed, in order. */
  steps?: string[];
  /** Whether a retry with this key now would replay the stored outcome (E2). */
  replayable: boolean;
  /** The stored outcome itself, only while `replayable`; never past the retention. */
  outcome?: StoredOutcomeValue;
}

/** A stored outcome as the status lookup returns it: the value, or the error as described. */
export type StoredOutcomeValue =
  | { kind: 'success'; value: unknown }
  | { kind: 'error'; error: { name: string; code: string; message: string; status: number } };

/**
 * The answer of a key's status lookup: every generation of (operation, key) under the caller's
 * principal, oldest first. A lookup that finds nothing (an unknown key, or another principal's:
 * the same answer) answers `null` (404 over plain HTTP).
 */
export interface KeyStatusDocument {
  key: string;
  /** The operation asked about. */
  operation: string;
  generations: KeyGenerationStatus[];
}

/**
 * What a client learns when it reconciles a key instead of retrying it (the app decides what
 * to do with it; the client never sends the key again by itself):
 *
 * - `executed`: the operation ran; `at` and `status` say when and how it ended, and `value`
 *   (or `error`) is the stored outcome while it is still replayable. With several generations
 *   (the key was reused after its retention, R2) this is the first one that ran, and
 *   `executions` counts them all;
 * - `processing`: the key is claimed and no outcome is stored yet: it is still running, or its
 *   run ended without one (a crash; the next request with the key takes it over after the lease),
 *   or (E8) an attempt failed and left it resumable: a retry with the key and payload completes it;
 * - `not_found`: the server has no execution of this key for this caller: it never saw it, it was
 *   given back before its handler started, or it belongs to someone else (the same answer, so
 *   keys cannot be probed).
 */
export type Reconciliation<T = unknown> =
  | {
      kind: 'executed';
      key: string;
      operation: string;
      /** The generation that ran first. */
      generation: number;
      /** When its outcome was stored. */
      at: Date;
      /** Its outcome's HTTP-equivalent status. */
      status: number;
      outcomeKind: 'success' | 'error';
      /** Whether the stored outcome is still replayed (and so given here). */
      replayable: boolean;
      /** The stored value, while replayable and a success. */
      value?: T;
      /** The stored error, while replayable and an error. */
      error?: { name: string; code: string; message: string; status: number };
      /** How many generations of the key ran: more than 1 means it was executed again after its retention. */
      executions: number;
      generations: KeyGenerationStatus[];
    }
  | { kind: 'processing'; key: string; operation: string; since: Date; generations: KeyGenerationStatus[] }
  | { kind: 'not_found'; key: string; operation: string };

/**
 * The {@link Reconciliation} a status lookup's answer amounts to (`null`: nothing found).
 * @throws TypeError `[idem] …` when `document` is not a key status document.
 */
export function toReconciliation<T = unknown>(
  key: string,
  operation: string,
  document: KeyStatusDocument | null | undefined,
): Reconciliation<T> {
  if (document === null || document === undefined) return { kind: 'not_found', key, operation };
  const generations = readGenerations(document);
  // E8: a resumable generation has the failed attempt's status, but did not complete: a retry completes it.
  const ran = generations.filter(
    (generation) => generation.status !== null && generation.outcomeKind !== null && generation.state !== 'resumable',
  );
  const first = ran[0];
  if (first) {
    const executed: Extract<Reconciliation<T>, { kind: 'executed' }> = {
      kind: 'executed',
      key,
      operation,
      generation: first.generation,
      at: new Date(first.completedAt ?? first.firstSeenAt),
      status: first.status!,
      outcomeKind: first.outcomeKind!,
      replayable: first.replayable,
      executions: ran.length,
      generations,
    };
    if (first.replayable && first.outcome?.kind === 'success') executed.value = first.outcome.value as T;
    if (first.replayable && first.outcome?.kind === 'error') executed.error = first.outcome.error;
    return executed;
  }
  const claimed = generations.find(
    (generation) =>
      generation.state === 'processing' ||
      generation.state === 'resumable' ||
      (generation.state === 'archived' && generation.status === null),
  );
  if (claimed) return { kind: 'processing', key, operation, since: new Date(claimed.firstSeenAt), generations };
  return { kind: 'not_found', key, operation };
}

function readGenerations(document: KeyStatusDocument): KeyGenerationStatus[] {
  const generations = (document as { generations?: unknown } | null)?.generations;
  if (
    !Array.isArray(generations) ||
    !generations.every((generation: unknown) => {
      const fields = generation as Partial<Record<keyof KeyGenerationStatus, unknown>> | null;
      return (
        typeof fields === 'object' &&
        fields !== null &&
        typeof fields.generation === 'number' &&
        typeof fields.state === 'string' &&
        typeof fields.firstSeenAt === 'string'
      );
    })
  )
    throw new TypeError('[idem] the key status lookup did not answer a key status document (generations)');
  return generations as KeyGenerationStatus[];
}

/**
 * How many operations left unresolved a client remembers (oldest forgotten first): enough for
 * the retries of the operations it has in flight, bounded so that a long-lived process does not
 * accumulate them.
 */
const UNRESOLVED_OPERATIONS_KEPT = 100;

/**
 * For client adapters: the keys of operations whose outcome is unknown (every attempt failed
 * without an answer), by an identity the adapter chooses (the caller's key, or the operation and
 * its input). A retry layer above the client (tRPC's `retryLink`, Apollo's `RetryLink`, urql's
 * `retryExchange`, a loop of the caller's) sends the same operation again as a new one: found
 * here, it carries the same key and keeps its first attempt's deadline.
 */
export class UnresolvedOperations {
  readonly #entries = new Map<string, { key: string; firstAttemptAt: number }>();

  /** Removes and returns the entry: while its operation is in flight again, nobody else takes it. */
  take(identity: string): { key: string; firstAttemptAt: number } | undefined {
    const entry = this.#entries.get(identity);
    this.#entries.delete(identity);
    return entry;
  }

  keep(identity: string, entry: { key: string; firstAttemptAt: number }): void {
    this.#entries.delete(identity);
    this.#entries.set(identity, entry);
    if (this.#entries.size > UNRESOLVED_OPERATIONS_KEPT) this.#entries.delete(this.#entries.keys().next().value!);
  }
}
