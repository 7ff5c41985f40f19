/** The group-commit batcher alone (no database): grouping, order, failure, retry alone. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { grouped, type GroupMode } from '../src/group-commit.ts';

/** A deferred result the test settles by hand. */
function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** `one` and `many` that record their calls and answer when the test says so. */
function manual() {
  const sent: Array<{ inputs: number[]; settle: ReturnType<typeof deferred<number[]>> }> = [];
  const one = (input: number) => {
    const settle = deferred<number[]>();
    sent.push({ inputs: [input], settle });
    return settle.promise.then((outputs) => outputs[0] as number);
  };
  const many = (inputs: number[]) => {
    const settle = deferred<number[]>();
    sent.push({ inputs, settle });
    return settle.promise;
  };
  const answer = (i: number) => sent[i]?.settle.resolve(sent[i].inputs.map((x) => x * 10));
  return { sent, one, many, answer };
}

const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('group commit: inFlight', () => {
  it('sends a lone call at once, through one, with no timer', async () => {
    const m = manual();
    const call = grouped(m.one, m.many, { mode: 'inFlight', maxInFlight: 1 });
    const result = call(7);
    expect(m.sent.map((s) => s.inputs)).toEqual([[7]]);
    m.answer(0);
    expect(await result).toBe(70);
  });

  it('queues the calls that arrive while the lanes are busy and sends them as one group', async () => {
    const m = manual();
    const call = grouped(m.one, m.many, { mode: 'inFlight', maxInFlight: 2 });
    const results = [1, 2, 3, 4, 5, 6].map(call);
    expect(m.sent.map((s) => s.inputs)).toEqual([[1], [2]]);
    m.answer(0);
    await tick();
    expect(m.sent.map((s) => s.inputs)).toEqual([[1], [2], [3, 4, 5, 6]]);
    m.answer(1);
    m.answer(2);
    expect(await Promise.all(results)).toEqual([10, 20, 30, 40, 50, 60]);
  });

  it('caps a group at maxGroup calls', async () => {
    const m = manual();
    const call = grouped(m.one, m.many, { mode: 'inFlight', maxInFlight: 1, maxGroup: 2 });
    const results = [1, 2, 3, 4, 5].map(call);
    m.answer(0);
    await tick();
    m.answer(1);
    await tick();
    m.answer(2);
    await tick();
    expect(m.sent.map((s) => s.inputs)).toEqual([[1], [2, 3], [4, 5]]);
    expect(await Promise.all(results)).toEqual([10, 20, 30, 40, 50]);
  });

  it('E-rules: a failed group is retried one call at a time, so a poisoned call fails alone', async () => {
    const alone: number[] = [];
    const call = grouped(
      async (x: number) => {
        alone.push(x);
        if (x === 3) throw new Error('poisoned 3');
        return x * 10;
      },
      async (xs: number[]) => {
        if (xs.includes(3)) throw new Error('the group failed');
        return xs.map((x) => x * 10);
      },
      { mode: 'inFlight', maxInFlight: 1 },
    );
    const results = await Promise.allSettled([1, 2, 3, 4].map(call));
    expect(results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message))).toEqual([
      10,
      20,
      'poisoned 3',
      40,
    ]);
    // 1 alone, then the group [2, 3, 4] failed and each went alone.
    expect(alone).toEqual([1, 2, 3, 4]);
  });

  it('E-rules: without retryAlone, a failed group rejects each of its calls with its error', async () => {
    const failure = new Error('the group failed');
    const call = grouped(
      async (x: number) => x,
      async () => {
        throw failure;
      },
      { mode: 'inFlight', maxInFlight: 1, retryAlone: false },
    );
    const results = await Promise.allSettled([1, 2, 3].map(call));
    expect(results).toEqual([
      { status: 'fulfilled', value: 1 },
      { status: 'rejected', reason: failure },
      { status: 'rejected', reason: failure },
    ]);
  });

  it('a many that answers the wrong number of results fails its group (then each goes alone)', async () => {
    let manyCalls = 0;
    const call = grouped(
      async (x: number) => x,
      async (xs: number[]) => {
        manyCalls++;
        return xs.slice(1);
      },
      { mode: 'inFlight', maxInFlight: 1 },
    );
    expect(await Promise.all([1, 2, 3].map(call))).toEqual([1, 2, 3]);
    expect(manyCalls).toBe(1);
  });

  it('a synchronous throw in one or many becomes a rejection', async () => {
    const call = grouped<number, number>(
      () => {
        throw new Error('sync one');
      },
      () => {
        throw new Error('sync many');
      },
      { mode: 'inFlight', maxInFlight: 1, retryAlone: false },
    );
    const results = await Promise.allSettled([1, 2, 3].map(call));
    expect(results.map((r) => r.status === 'rejected' && (r.reason as Error).message)).toEqual([
      'sync one',
      'sync many',
      'sync many',
    ]);
  });

  it('refuses lanes or groups that are not positive integers', () => {
    const f = async (x: number) => x;
    const fs = async (xs: number[]) => xs;
    expect(() => grouped(f, fs, { mode: 'inFlight', maxInFlight: 0 })).toThrow(RangeError);
    expect(() => grouped(f, fs, { mode: 'inFlight', maxGroup: 1.5 })).toThrow(RangeError);
  });
});

describe('group commit: tick', () => {
  it('runs the first call at once and the calls of the same tick as one group at setImmediate', async () => {
    const m = manual();
    const call = grouped(m.one, m.many, { mode: 'tick' });
    const results = [1, 2, 3].map(call);
    expect(m.sent.map((s) => s.inputs)).toEqual([[1]]);
    await tick();
    expect(m.sent.map((s) => s.inputs)).toEqual([[1], [2, 3]]);
    // The next call after the flush runs at once again.
    const later = call(4);
    expect(m.sent.map((s) => s.inputs)).toEqual([[1], [2, 3], [4]]);
    m.answer(0);
    m.answer(1);
    m.answer(2);
    expect(await Promise.all([...results, later])).toEqual([10, 20, 30, 40]);
  });

  it('a group of one made in the tick goes through one', async () => {
    const m = manual();
    const call = grouped(m.one, m.many, { mode: 'tick' });
    const results = [1, 2].map(call);
    await tick();
    m.answer(0);
    m.answer(1);
    expect(await Promise.all(results)).toEqual([10, 20]);
    expect(m.sent.map((s) => s.inputs)).toEqual([[1], [2]]);
  });
});

/**
 * Any interleaving of calls and of the order in which statements answer (or fail): each call
 * gets exactly its own result or error, once, and no call is lost; a group preserves its order.
 */
describe('group commit: properties', () => {
  for (const mode of ['inFlight', 'tick'] as GroupMode[]) {
    it(`${mode}: every call settles exactly once with its own result, whatever the interleaving`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 40 }), // calls per step
          fc.array(fc.nat(), { minLength: 1, maxLength: 200 }), // which pending statement answers next
          fc.integer({ min: 1, max: 4 }),
          fc.integer({ min: 1, max: 8 }),
          fc.boolean(),
          async (bursts, picks, maxInFlight, maxGroup, retryAlone) => {
            const pending: Array<{ inputs: number[]; resolve: (o: number[]) => void; reject: (e: unknown) => void }> =
              [];
            const sentInputs: number[][] = [];
            const run = (inputs: number[]) =>
              new Promise<number[]>((resolve, reject) => {
                sentInputs.push(inputs);
                pending.push({ inputs, resolve, reject });
              });
            const call = grouped(
              (x: number) => run([x]).then((o) => o[0] as number),
              (xs: number[]) => run(xs),
              { mode, maxInFlight, maxGroup, retryAlone },
            );
            // Inputs that fail (alone and in any group that holds them): every 7th.
            const poisoned = (x: number) => x % 7 === 6;
            const settled = new Map<number, { value?: number; error?: string; times: number }>();
            const calls: Promise<void>[] = [];
            let next = 0;
            let p = 0;
            const answerOne = () => {
              if (pending.length === 0) return;
              const [s] = pending.splice((picks[p++ % picks.length] ?? 0) % pending.length, 1);
              if (!s) return;
              if (s.inputs.some(poisoned)) s.reject(new Error(`failed ${s.inputs.join(',')}`));
              else s.resolve(s.inputs.map((x) => x * 2 + 1));
            };
            for (const burst of bursts) {
              for (let i = 0; i < burst; i++) {
                const x = next++;
                calls.push(
                  call(x).then(
                    (value) => {
                      const seen = settled.get(x);
                      settled.set(x, { value, times: (seen?.times ?? 0) + 1 });
                    },
                    (error: Error) => {
                      const seen = settled.get(x);
                      settled.set(x, { error: error.message, times: (seen?.times ?? 0) + 1 });
                    },
                  ),
                );
              }
              answerOne();
              await tick();
            }
            while (settled.size < next || pending.length > 0) {
              answerOne();
              await tick();
            }
            await Promise.all(calls);
            expect(settled.size).toBe(next);
            for (let x = 0; x < next; x++) {
              const got = settled.get(x);
              expect(got?.times).toBe(1);
              if (!poisoned(x)) {
                // A healthy call gets its own result, unless its group failed and was not retried.
                if (got?.error === undefined) expect(got?.value).toBe(x * 2 + 1);
                else expect(retryAlone).toBe(false);
              } else {
                expect(got?.error).toBeDefined();
              }
            }
            // Groups keep input order and never exceed maxGroup; no input is sent twice but for a retry alone.
            for (const inputs of sentInputs) {
              expect(inputs.length).toBeLessThanOrEqual(maxGroup);
              expect([...inputs].sort((a, b) => a - b)).toEqual(inputs);
            }
          },
        ),
        { numRuns: 150 },
      );
    });
  }
});
