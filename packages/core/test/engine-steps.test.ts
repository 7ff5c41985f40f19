/**
 * E8 in the engine, on MemoryStore: `claim.step` (names, stored results, `undefined`, the size
 * bound, fencing), the record's mode deciding a failure's fate, final failures, `notStarted`
 * after a step, the retention each mode defaults to, and steps per part of a unit.
 */
import { describe, expect, it } from 'vitest';
import { createEngine, LeaseLostError, MemoryStore, notStarted, type ClaimContext } from '@idem/core';
import {
  claimForPart,
  finalFailure,
  MAX_STEP_NAME_LENGTH,
  notStartedAnswer,
  outcomeCodec,
  StepResultTooLargeError,
} from '@idem/core/adapter';

const scope = 'payments.create/acct_1';
const transient = () => Object.assign(new Error('provider timeout'), { status: 503 });
const clocked = () => {
  let now = Date.parse('2026-12-01T10:00:00.000Z');
  return { store: new MemoryStore({ now: () => now }), advance: (ms: number) => void (now += ms) };
};

describe('E8: claim.step and onFailure in the engine', () => {
  it('E8: a step name must have 1 to 200 characters', async () => {
    const engine = createEngine({ store: new MemoryStore() });
    for (const name of ['', 'x'.repeat(MAX_STEP_NAME_LENGTH + 1)]) {
      const result = await engine.execute({ scope, key: `k-${name.length}`, fingerprint: null }, (claim) =>
        claim.step(name, () => 1),
      );
      expect(result).toMatchObject({ ok: false, error: expect.any(TypeError) });
    }
    const ok = await engine.execute({ scope, key: 'k-200', fingerprint: null }, (claim) =>
      claim.step('x'.repeat(MAX_STEP_NAME_LENGTH), () => 1),
    );
    expect(ok).toMatchObject({ ok: true, value: 1 });
  });

  it('E8: a stored undefined, a Date-free JSON value and a repeated name come back without running the step again', async () => {
    const engine = createEngine({ store: new MemoryStore(), onFailure: 'resume' });
    const runs: string[] = [];
    let attempt = 0;
    const handler = async (claim: ClaimContext) => {
      const nothing = await claim.step('nothing', () => void runs.push('nothing'));
      const value = await claim.step('value', () => (runs.push('value'), { n: 1, list: [1, 'a'] }));
      // The same name again in one run: its result, not a second run.
      const again = await claim.step('value', () => (runs.push('again'), { n: 2 }));
      if (++attempt === 1) throw transient();
      return { nothing, value, again, attempt: claim.attempt };
    };
    expect(await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler)).toMatchObject({ resumable: true });
    expect(await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler)).toEqual({
      ok: true,
      replayed: false,
      generation: 1,
      value: { nothing: undefined, value: { n: 1, list: [1, 'a'] }, again: { n: 1, list: [1, 'a'] }, attempt: 2 },
    });
    expect(runs).toEqual(['nothing', 'value']);
  });

  it('E8: concurrent calls of one step name in a run share its single run', async () => {
    const engine = createEngine({ store: new MemoryStore() });
    let runs = 0;
    const result = await engine.execute({ scope, key: 'k', fingerprint: null }, (claim) =>
      Promise.all([claim.step('a', async () => ++runs), claim.step('a', async () => ++runs)]),
    );
    expect(result).toMatchObject({ ok: true, value: [1, 1] });
    expect(runs).toBe(1);
  });

  it('E8: the stored steps are bounded by maxStoredBytes: a step over it throws StepResultTooLargeError and is not stored', async () => {
    const store = new MemoryStore();
    const engine = createEngine({ store, maxStoredBytes: 64 });
    let caught: unknown;
    await engine.execute({ scope, key: 'k', fingerprint: null }, async (claim) => {
      await claim.step('small', () => 'x'.repeat(30));
      try {
        await claim.step('large', () => 'y'.repeat(40));
      } catch (error) {
        caught = error;
      }
      return 'done';
    });
    expect(caught).toBeInstanceOf(StepResultTooLargeError);
    expect(caught).toMatchObject({ step: 'large', maxStoredBytes: 64 });
    expect((await store.get(scope, 'k'))?.steps.map((step) => step.name)).toEqual(['small']);
  });

  it('E8/E6: a step whose claim was taken over meanwhile is fenced: its result is not stored, LeaseLostError', async () => {
    const { store, advance } = clocked();
    const engine = createEngine({ store, lease: '1h' });
    let caught: unknown;
    let resume!: () => void;
    const inside = new Promise<void>((resolve) => (resume = resolve));
    let entered!: () => void;
    const started = new Promise<void>((resolve) => (entered = resolve));
    const first = engine.execute({ scope, key: 'k', fingerprint: 'f' }, async (claim) => {
      try {
        await claim.step('charge', async () => {
          entered();
          await inside;
          return 'stale';
        });
      } catch (error) {
        caught = error;
        throw error;
      }
    });
    await started;
    advance(3_600_001);
    const second = await engine.execute({ scope, key: 'k', fingerprint: 'f' }, (claim) =>
      claim.step('charge', () => `fresh ${claim.attempt}`),
    );
    expect(second).toMatchObject({ ok: true, value: 'fresh 2' });
    resume();
    await first;
    expect(caught).toBeInstanceOf(LeaseLostError);
    expect((await store.get(scope, 'k'))?.steps).toEqual([{ name: 'charge', result: '"fresh 2"' }]);
  });

  it("E8: the record's mode decides: a generation claimed under resume stays resumable when the endpoint is now replay", async () => {
    const store = new MemoryStore();
    const resume = createEngine({ store, onFailure: 'resume' });
    const replay = createEngine({ store, onFailure: 'replay' });
    const failing = () => {
      throw transient();
    };
    expect(await resume.execute({ scope, key: 'k', fingerprint: 'f' }, failing)).toMatchObject({ resumable: true });
    expect(await replay.execute({ scope, key: 'k', fingerprint: 'f' }, failing)).toMatchObject({
      replayed: false,
      resumable: true,
    });
    expect(await store.get(scope, 'k')).toMatchObject({ state: 'resumable', onFailure: 'resume', attempts: 2 });
    // And a generation claimed under replay is replayed, whatever the endpoint says now.
    await replay.execute({ scope, key: 'k2', fingerprint: 'f' }, failing);
    expect(await resume.execute({ scope, key: 'k2', fingerprint: 'f' }, failing)).toMatchObject({ replayed: true });
  });

  it('E8: under resume a 4xx and a failure wrapped in finalFailure are final: stored and replayed, never resumed', async () => {
    const engine = createEngine({ store: new MemoryStore(), onFailure: 'resume' });
    let runs = 0;
    const declined = () => {
      runs++;
      throw Object.assign(new Error('card declined'), { status: 402 });
    };
    const final = () => {
      runs++;
      throw finalFailure(transient());
    };
    for (const [key, handler] of [
      ['declined', declined],
      ['final', final],
    ] as const) {
      const first = await engine.execute({ scope, key, fingerprint: 'f' }, handler);
      expect(first).toMatchObject({ ok: false, replayed: false });
      expect(first.resumable).toBeUndefined();
      expect(await engine.execute({ scope, key, fingerprint: 'f' }, handler)).toMatchObject({ replayed: true });
    }
    expect(runs).toBe(2);
  });

  it("E8: under resume a success value the codec stores with a 5xx status (a Fetch handler's 500 Response) is resumable, unless marked final", async () => {
    const engine = createEngine({ store: new MemoryStore(), onFailure: 'resume' });
    const codec = outcomeCodec<{ status: number }, { status: number }>({
      stringify: JSON.stringify,
      parse: JSON.parse,
      statusOf: (value) => value.status,
    });
    const live = await engine.execute({ scope, key: 'k', fingerprint: 'f', codec }, () => ({ status: 500 }));
    expect(live).toEqual({ ok: true, replayed: false, value: { status: 500 }, generation: 1, resumable: true });
    const marked = await engine.execute({ scope, key: 'k2', fingerprint: 'f', codec }, () =>
      finalFailure({ status: 500 }),
    );
    expect(marked.resumable).toBeUndefined();
    expect(await engine.execute({ scope, key: 'k2', fingerprint: 'f', codec }, () => ({ status: 201 }))).toMatchObject({
      replayed: true,
      value: { status: 500 },
    });
  });

  it('E4/E8: notStarted before any step releases the claim; after a step it does not: the failure is stored (replay) or resumable (resume)', async () => {
    const store = new MemoryStore();
    for (const onFailure of ['replay', 'resume'] as const) {
      const engine = createEngine({ store, onFailure });
      const before = await engine.execute({ scope, key: `before-${onFailure}`, fingerprint: 'f' }, () =>
        notStartedAnswer('rate limited'),
      );
      expect(before).toMatchObject({ notStarted: true, answer: 'rate limited' });
      expect((await store.get(scope, `before-${onFailure}`))?.state).toBe('released');
      const key = `after-${onFailure}`;
      const after = await engine.execute({ scope, key, fingerprint: 'f' }, async (claim) => {
        await claim.step('reserve', () => 'h_1');
        return notStartedAnswer('rate limited');
      });
      expect(after).toMatchObject({ notStarted: true, answer: 'rate limited' });
      expect(after.resumable).toBe(onFailure === 'resume' ? true : undefined);
      expect(await store.get(scope, key)).toMatchObject({
        state: onFailure === 'resume' ? 'resumable' : 'completed',
        outcome: { kind: 'error', status: 500 },
        steps: [{ name: 'reserve', result: '"h_1"' }],
      });
    }
    // The resolver form: `notStarted(ctx, error)` after a step, through a claim on the context.
    const ctx = {};
    const engine = createEngine({ store });
    await engine.execute({ scope, key: 'resolver', fingerprint: 'f' }, async (claim) => {
      Object.assign(ctx, { [Symbol.for('@idem/claim')]: claim });
      await claim.step('reserve', () => 'h_1');
      throw notStarted(ctx, Object.assign(new Error('too many'), { status: 429 }));
    });
    expect((await store.get(scope, 'resolver'))?.state).toBe('completed');
  });

  it('R1/E8: retention defaults to 24 hours for replay and 30 days for resume, unless the engine or the endpoint sets one', async () => {
    const day = 86_400_000;
    const retentionOf = async (engine: ReturnType<typeof createEngine>, request: object = {}) => {
      const key = crypto.randomUUID();
      await engine.execute({ scope, key, fingerprint: null, ...request }, () => 'ok');
      const record = await engine.store.get(scope, key);
      return record!.expiresAt.getTime() - record!.completedAt!.getTime();
    };
    const store = new MemoryStore();
    expect(await retentionOf(createEngine({ store }))).toBe(day);
    expect(await retentionOf(createEngine({ store }), { onFailure: 'resume' })).toBe(30 * day);
    expect(await retentionOf(createEngine({ store, onFailure: 'resume' }))).toBe(30 * day);
    expect(createEngine({ store, onFailure: 'resume' }).policy).toMatchObject({
      retentionMs: 30 * day,
      retentionExplicit: false,
      onFailure: 'resume',
    });
    expect(await retentionOf(createEngine({ store, retention: '2h' }), { onFailure: 'resume' })).toBe(2 * 3_600_000);
    expect(await retentionOf(createEngine({ store, onFailure: 'resume' }), { retention: '1h' })).toBe(3_600_000);
  });

  it('E8: steps of one part of a unit are stored apart from another part, each with its own derived key', async () => {
    const store = new MemoryStore();
    const engine = createEngine({ store });
    const keys: string[] = [];
    await engine.execute({ scope, key: 'k', fingerprint: null }, async (claim) => {
      for (const part of ['first', 'second'])
        await claimForPart(claim, part).step('charge', (stepKey) => keys.push(stepKey));
      return 'done';
    });
    expect(new Set(keys).size).toBe(2);
    expect((await store.get(scope, 'k'))?.steps.map((step) => step.name)).toEqual(['first:charge', 'second:charge']);
  });
});
