/**
 * E8, E6: a model-based property test of recovery points (`claim.step`) and of the two failure
 * modes (`onFailure: 'replay'`, Stripe v1; `'resume'`, Stripe v2), written once for every store:
 * `packages/core/test/steps-model.test.ts` runs it on `MemoryStore`, `@idem/drizzle`'s tests on
 * SQLite and PostgreSQL.
 *
 * A random handler of 1–5 steps; each step's side effect goes to an external ledger that, like a
 * real provider, applies one effect per idempotency key (the step's derived key) and answers a
 * repeated key with the first answer. Faults are planned for the handler's executions: a
 * transient failure (503), a final failure (a 4xx, or `finalFailure`), or a crash — before a
 * step, inside it (after its side effect, before its result is stored) or after it. A crash is a
 * process that dies: its store calls never settle from then on, so its lease is no longer renewed,
 * and the next retry takes the claim over once the lease has passed (E6). Random retries follow
 * until the key answers a stored outcome, which is then replayed.
 *
 * The oracle is a model of what the client must see at each attempt, and:
 * - each step ran to completion at most once per generation (a stored result is reused, never
 *   run again), and every run of a step used the same derived step key;
 * - the ledger applied each step's side effect exactly once per step key (and for completed steps);
 * - a success answers the values of the completed steps, the ledger's;
 * - replay (v1): the first outcome (a failure included) is replayed, and the record never
 *   changes after completion; resume (v2): a transient failure is answered `resumable` and the
 *   next retry runs again, skipping completed steps; a final failure is replayed.
 */
import fc from 'fast-check';
import { expect } from 'vitest';
import { finalFailure } from '../../src/adapter.ts';
import { createEngine } from '../../src/engine.ts';
import { FingerprintMismatchError } from '../../src/errors.ts';
import type { ClaimContext } from '../../src/claim.ts';
import type { IdempotencyRecord, IdempotencyStore, OnFailure } from '../../src/store.ts';

export interface StepsModelTarget {
  /** The store under test; every property run uses fresh keys in it. */
  store: () => IdempotencyStore;
  /**
   * Makes the store's clock pass `ms` milliseconds (a `MemoryStore` on a clock the test moves:
   * move it; a database: sleep).
   */
  passTime: (ms: number) => Promise<void>;
  /** The engine's lease, in ms: a crashed execution is taken over once it has passed. */
  leaseMs: number;
  /** fast-check runs. Defaults to 100. */
  numRuns?: number;
  /** A fixed seed, to replay a failure. */
  seed?: number;
  /**
   * Atomic mode, for a store that has it: each step also writes an application row through
   * `claim.tx`, and the oracle counts the rows that committed (a crash rolls its transaction
   * back: a step that completed in it runs again, under the same step key). The same shape as the
   * conformance suite's `atomic` option.
   */
  atomic?: { write(tx: unknown, id: string): Promise<void>; committed(id: string): Promise<boolean> };
}

type FaultKind = 'fail' | 'final' | 'finalMarked' | 'crash';
type Where = 'before' | 'inside' | 'after';
interface Fault {
  kind: FaultKind;
  step: number;
  where: Where;
}
export interface StepsScenario {
  onFailure: OnFailure;
  steps: number;
  /** The fault of the handler's n-th execution (none past its end, or where undefined). */
  plan: Array<Fault | undefined>;
  /** Before which attempts (after the first) a request with the key and another payload comes: 422, nothing changes. */
  strangers: number[];
}

const fault: fc.Arbitrary<Fault> = fc.record({
  kind: fc.constantFrom<FaultKind>('fail', 'final', 'finalMarked', 'crash'),
  step: fc.nat(4),
  where: fc.constantFrom<Where>('before', 'inside', 'after'),
});

export const stepsScenario: fc.Arbitrary<StepsScenario> = fc.record({
  onFailure: fc.constantFrom<OnFailure>('replay', 'resume'),
  steps: fc.integer({ min: 1, max: 5 }),
  plan: fc.array(fc.option(fault, { nil: undefined }), { maxLength: 6 }),
  strangers: fc.uniqueArray(fc.integer({ min: 1, max: 8 }), { maxLength: 3 }),
});

/** A provider that deduplicates by idempotency key: one effect per key, the first answer repeated. */
class Ledger {
  readonly applied = new Map<string, { value: string; calls: number }>();
  #next = 0;
  call(key: string, step: number): string {
    const entry = this.applied.get(key);
    if (entry) {
      entry.calls++;
      return entry.value;
    }
    const value = `step${step}-effect${++this.#next}`;
    this.applied.set(key, { value, calls: 1 });
    return value;
  }
}

/**
 * A process of the application: its own engine over the shared store, until it dies. Dead, its
 * store calls never settle, and its open transaction (atomic mode) ends as a lost connection
 * ends it: rolled back.
 */
function processStore(store: IdempotencyStore): { store: IdempotencyStore; kill: () => void } {
  let dead = false;
  const never = new Promise<never>(() => {});
  let die!: (reason: Error) => void;
  const died = new Promise<never>((_, reject) => (die = reject));
  died.catch(() => {});
  const proxy = new Proxy(store, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (typeof value !== 'function') return value;
      const method = value as (...a: unknown[]) => unknown;
      if (property === 'transaction')
        return (work: (t: unknown) => Promise<unknown>) =>
          dead ? never : method.call(target, (t: unknown) => Promise.race([work(t), died]));
      return (...args: unknown[]) => (dead ? never : method.apply(target, args));
    },
  });
  const kill = () => {
    dead = true;
    die(new Error('[steps model] the process died: its connection is gone'));
  };
  return { store: proxy, kill };
}

const transient = () => Object.assign(new Error('provider timeout'), { status: 503 });

/** What the model expects an attempt to answer. */
type Expected = { answer: 'replay'; ok: boolean; status: number; value?: string[] } | { answer: 'run' };

/** Runs one scenario against the store, asserting the oracle at every attempt. */
export async function checkStepsScenario(target: StepsModelTarget, scenario: StepsScenario): Promise<void> {
  const { onFailure, steps, plan, strangers } = scenario;
  const scope = `steps-model/${crypto.randomUUID()}`;
  const key = crypto.randomUUID();
  const ledger = new Ledger();
  const shared = target.store();
  // Per step: how many times its run was called, how many returned (completed), its keys.
  const runs = Array.from({ length: steps }, () => 0);
  const completions = Array.from({ length: steps }, () => 0);
  // Atomic mode: the application row each completed run of a step wrote (committed or not).
  const rows = Array.from({ length: steps }, () => [] as string[]);
  const stepKeys = Array.from({ length: steps }, () => new Set<string>());
  let executions = 0;
  let lastAttempt = 0;
  // The model: the stored outcome once there is one.
  let stored: { ok: boolean; status: number; value?: string[] } | undefined;
  let frozen: IdempotencyRecord | null = null;

  for (let attempt = 0; attempt < plan.length + 3; attempt++) {
    // F3/E8: the key with another payload, whatever state it is in: 422, the record unchanged.
    // (Not while it has no record: in atomic mode a crash of its first execution left none.)
    const before = strangers.includes(attempt) ? await shared.get(scope, key) : null;
    if (before) {
      const stranger = createEngine({ store: shared, lease: target.leaseMs, onFailure });
      let ran = false;
      await expect(
        stranger.execute({ scope, key, fingerprint: 'another payload' }, () => {
          ran = true;
          return [];
        }),
      ).rejects.toBeInstanceOf(FingerprintMismatchError);
      expect(ran).toBe(false);
      expect(await shared.get(scope, key)).toEqual(before);
    }
    const process = processStore(shared);
    const engine = createEngine({ store: process.store, lease: target.leaseMs, onFailure });
    let crashed!: () => void;
    const crash = new Promise<'crash'>((resolve) => (crashed = () => resolve('crash')));
    let thisFault: Fault | undefined;
    const act = async (where: Where, step: number): Promise<void> => {
      if (!thisFault || thisFault.where !== where || thisFault.step % steps !== step) return;
      switch (thisFault.kind) {
        case 'fail':
          throw transient();
        case 'final':
          throw Object.assign(new Error('card declined'), { status: 402 });
        case 'finalMarked':
          throw finalFailure(transient());
        case 'crash':
          process.kill();
          crashed();
          await new Promise<never>(() => {});
      }
    };
    const expected: Expected = stored ? { answer: 'replay', ...stored } : { answer: 'run' };
    const handler = async (claim: ClaimContext): Promise<string[]> => {
      const index = executions;
      thisFault = plan[executions++];
      lastAttempt = claim.attempt;
      const values: string[] = [];
      for (let i = 0; i < steps; i++) {
        await act('before', i);
        const value = await claim.step(`s${i}`, async (stepKey) => {
          runs[i]!++;
          stepKeys[i]!.add(stepKey);
          const answer = ledger.call(stepKey, i);
          if (target.atomic) {
            const row = `${key}-s${i}-e${index}`;
            await target.atomic.write(claim.tx, row);
            rows[i]!.push(row);
          }
          await act('inside', i);
          completions[i]!++;
          return answer;
        });
        values.push(value);
        await act('after', i);
      }
      return values;
    };
    const request = { scope, key, fingerprint: 'fp' };
    const execution = target.atomic
      ? engine.executeAtomic<string[]>(request, handler)
      : engine.execute<string[]>(request, handler);
    const result = await Promise.race([execution, crash]);
    const ran = executions;

    if (expected.answer === 'replay') {
      // E2: a stored outcome is replayed, the handler not run; v1: the record never changes.
      expect(result, 'a stored outcome is replayed').not.toBe('crash');
      if (result === 'crash') return;
      expect(result).toMatchObject({ replayed: true, ok: expected.ok });
      if (result.ok) expect(result.value).toEqual(expected.value);
      else expect((result.error as { status?: number }).status).toBe(expected.status);
      expect(await shared.get(scope, key)).toEqual(frozen);
      continue;
    }
    if (result === 'crash') {
      // The process died: the next retry takes its claim over once the lease has passed (E6).
      await target.passTime(target.leaseMs + 5);
      continue;
    }
    expect(result.replayed, 'a key without a stored outcome runs').toBe(false);
    const f = plan[ran - 1];
    const kind = f?.kind;
    if (result.ok) {
      // The answer is the completed steps' values, as the ledger gave them.
      const values = Array.from({ length: steps }, (_, i) => ledger.applied.get([...stepKeys[i]!][0]!)?.value);
      expect(result.value).toEqual(values);
      expect(result.resumable).toBeUndefined();
      stored = { ok: true, status: 200, value: result.value };
    } else {
      const status = (result.error as { status?: number }).status;
      const resumable = onFailure === 'resume' && kind === 'fail';
      expect(status).toBe(kind === 'final' ? 402 : 503);
      expect(result.resumable, `${kind} under ${onFailure}`).toBe(resumable ? true : undefined);
      const record = await shared.get(scope, key);
      expect(record?.state).toBe(resumable ? 'resumable' : 'completed');
      if (!resumable) stored = { ok: false, status: status! };
    }
    if (stored) frozen = await shared.get(scope, key);
  }

  // The key ended with a stored outcome, replayed above; the run never left it unanswered.
  expect(stored, 'the retries end with a stored outcome').toBeDefined();
  const record = await shared.get(scope, key);
  expect(record?.state).toBe('completed');
  expect(record?.attempts).toBe(lastAttempt);
  for (let i = 0; i < steps; i++) {
    // Atomic mode: a run whose transaction rolled back (a crash) did not complete; its row is not there.
    if (target.atomic) {
      const committed = await Promise.all(rows[i]!.map((row) => target.atomic!.committed(row)));
      completions[i] = committed.filter(Boolean).length;
    }
    // At most one completed run of each step per generation, all under one derived key.
    expect(completions[i], `step s${i} ran to completion at most once`).toBeLessThanOrEqual(1);
    expect(stepKeys[i]!.size).toBeLessThanOrEqual(1);
    const key = [...stepKeys[i]!][0];
    // The ledger applied the effect once per step key; a re-run (a crash inside, a failure inside) was deduplicated.
    if (key !== undefined) expect(ledger.applied.get(key)?.calls).toBe(runs[i]);
    // A stored step is a completed one, with the ledger's value.
    const saved = record?.steps.find((step) => step.name === `s${i}`);
    if (saved) expect(JSON.parse(saved.result!)).toBe(ledger.applied.get(key!)?.value);
    expect(saved !== undefined).toBe(completions[i] === 1);
  }
  if (stored?.ok) expect(completions.every((count) => count === 1)).toBe(true);
}

/** The property: every scenario passes {@link checkStepsScenario}. */
export async function checkStepsModel(target: StepsModelTarget): Promise<void> {
  await fc.assert(
    fc.asyncProperty(stepsScenario, (scenario) => checkStepsScenario(target, scenario)),
    { numRuns: target.numRuns ?? 100, ...(target.seed === undefined ? {} : { seed: target.seed }) },
  );
}
