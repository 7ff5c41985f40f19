/**
 * E8, recovery points: `claim.step(name, run)` runs `run` at most once per record and generation
 * and stores its result with the record, so that every later attempt of the generation (a resume
 * of a resumable failure, a takeover after a crash) gets the result back without running it again.
 */
import type { ClaimContext } from './claim.js';
import { LeaseLostError } from './lease.js';
import { deserializeValue, serializeValue, type OutcomeSerializer } from './outcome.js';
import type { StoredStep } from './store.js';

/** The longest step name, in characters. */
export const MAX_STEP_NAME_LENGTH = 200;

/**
 * E8: thrown by `claim.step` when its result would bring the record's stored steps over
 * `maxStoredBytes` (UTF-8): the result is not stored, and the step's work did happen. Thrown into
 * the handler, like any error of it: uncaught, it is the handler's failure.
 */
export class StepResultTooLargeError extends Error {
  readonly code = 'idempotency_step_too_large';
  constructor(
    readonly step: string,
    /** The bytes the steps would hold with this result. */
    readonly bytes: number,
    readonly maxStoredBytes: number,
  ) {
    super(
      `[idem] the result of step "${step}" would bring the stored steps to ${bytes} bytes, over the ${maxStoredBytes} bytes idem stores: it is not stored (its work did happen). Return less from the step, or raise maxStoredBytes.`,
    );
    this.name = 'StepResultTooLargeError';
  }
}

/** Where a step's result is written: fenced on the claim's token (false: the claim is lost, E6). */
export type SaveStep = (name: string, result: string) => Promise<boolean>;

export interface StepRunnerOptions {
  /** The steps the record holds at the claim. */
  steps: readonly StoredStep[];
  serializer: OutcomeSerializer;
  maxStoredBytes: number;
  deriveKey: (label: string) => string;
  save: SaveStep;
}

/** One execution's steps: the function behind `claim.step`, and what it stored. */
export interface StepRunner {
  step: ClaimContext['step'];
  /** Whether the generation has a step stored (at the claim, or by this execution): a side effect happened. */
  recorded(): boolean;
}

export function stepRunner({ steps, serializer, maxStoredBytes, deriveKey, save }: StepRunnerOptions): StepRunner {
  const stored = new Map<string, string>();
  // `?? []`: a store written before E8 answers records without steps.
  for (const { name, result } of steps ?? []) if (result !== null) stored.set(name, result);
  // A step of this name running now: a second call with the name waits for the same run.
  const running = new Map<string, Promise<unknown>>();
  const bytes = () => {
    let total = 0;
    for (const result of stored.values()) total += Buffer.byteLength(result, 'utf8');
    return total;
  };

  const runStep = async (name: string, run: (stepKey: string) => unknown): Promise<unknown> => {
    const value = await run(deriveKey(name));
    const result = serializeValue(serializer, value);
    const total = bytes() + Buffer.byteLength(result, 'utf8');
    if (total > maxStoredBytes) throw new StepResultTooLargeError(name, total, maxStoredBytes);
    if (!(await save(name, result))) throw new LeaseLostError('fenced');
    stored.set(name, result);
    return value;
  };

  const step = async <T>(name: string, run: (stepKey: string) => Promise<T> | T): Promise<T> => {
    assertStepName(name);
    const result = stored.get(name);
    if (result !== undefined) return deserializeValue(serializer, result) as T;
    const pending = running.get(name);
    if (pending) return (await pending) as T;
    const started = runStep(name, run);
    running.set(name, started);
    try {
      return (await started) as T;
    } finally {
      running.delete(name);
    }
  };

  return { step, recorded: () => stored.size > 0 };
}

function assertStepName(name: unknown): asserts name is string {
  if (typeof name !== 'string' || name.length === 0 || name.length > MAX_STEP_NAME_LENGTH)
    throw new TypeError(
      `[idem] claim.step needs a name of 1 to ${MAX_STEP_NAME_LENGTH} characters, unique in its handler (got ${typeof name === 'string' ? `${name.length} characters` : typeof name})`,
    );
}
