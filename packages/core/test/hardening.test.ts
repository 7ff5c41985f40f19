/**
 * Hardening (issue 14): defects an adversarial black-box pass found in the core, each pinned by
 * a test that failed before its fix.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  canonicalize,
  computeFingerprint,
  createEngine,
  InputTooDeepError,
  MAX_FINGERPRINT_DEPTH,
  MemoryStore,
  RequestInProgressError,
} from '@idem/core';

/** `depth` containers nested in one another, built without recursion. */
function nested(depth: number, wrap: (inner: unknown) => unknown): unknown {
  let value: unknown = 1;
  for (let level = 0; level < depth; level++) value = wrap(value);
  return value;
}

describe('canonicalize on deeply nested input (issue 14, item 15)', () => {
  it.each([
    ['arrays', (inner: unknown) => [inner]],
    ['objects', (inner: unknown) => ({ a: inner })],
    ['maps', (inner: unknown) => new Map([['a', inner]])],
    ['sets', (inner: unknown) => new Set([inner])],
  ])('F1: %s nested 100,000 deep are refused with a 400 InputTooDeepError, not a stack overflow', (_kind, wrap) => {
    const deep = nested(100_000, wrap);
    let thrown: unknown;
    try {
      canonicalize(deep);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(InputTooDeepError);
    expect(thrown).toMatchObject({ status: 400, code: 'idempotency_input_too_deep', maxDepth: MAX_FINGERPRINT_DEPTH });
  });

  it('F1: input exactly MAX_FINGERPRINT_DEPTH containers deep is still fingerprinted; one more is refused', async () => {
    const deepest = nested(MAX_FINGERPRINT_DEPTH, (inner) => [inner]);
    expect(canonicalize(deepest)).toBe(`${'['.repeat(MAX_FINGERPRINT_DEPTH)}1${']'.repeat(MAX_FINGERPRINT_DEPTH)}`);
    await expect(computeFingerprint({ tree: deepest })).rejects.toBeInstanceOf(InputTooDeepError);
    await expect(computeFingerprint(deepest)).resolves.toMatch(/^f1:[0-9a-f]{64}$/);
  });
});

describe('a retention shorter than the lease (issue 14, item 3)', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('R1: the engine warns once, with code IDEM_RETENTION_BELOW_LEASE, when an endpoint keeps outcomes for less time than its lease', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const engine = createEngine({ store: new MemoryStore(), retention: '3s', lease: '30s' });
    createEngine({ store: new MemoryStore(), retention: '3s', lease: '30s' });
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0]).toEqual([
      expect.stringMatching(/^\[idem\] the retention \(3s\) is shorter than the lease \(30s\)/),
      { code: 'IDEM_RETENTION_BELOW_LEASE' },
    ]);
    // A per-request policy is checked too, once per distinct pair.
    await engine.execute({ scope: 's', key: 'k1', fingerprint: null, retention: '2s', lease: '1m' }, () => 1);
    await engine.execute({ scope: 's', key: 'k2', fingerprint: null, retention: '2s', lease: '1m' }, () => 1);
    expect(warn).toHaveBeenCalledTimes(2);
    expect(warn.mock.calls[1]![0]).toMatch(/retention \(2s\) is shorter than the lease \(1m\)/);
  });

  it('R1: no warning when the retention is at least the lease (the defaults: 24h and 30s)', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    createEngine({ store: new MemoryStore() });
    createEngine({ store: new MemoryStore(), retention: '30s', lease: '30s' });
    expect(warn).not.toHaveBeenCalled();
  });

  it('R1: with a 3 s retention, a 30 s lease and a handler that takes 4.5 s, a retry at 3.5 s gets 409 and the outcome is replayed until 3 s after completion', async () => {
    vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    let now = Date.parse('2026-11-30T10:00:00.000Z');
    const store = new MemoryStore({ now: () => now });
    const events: string[] = [];
    const engine = createEngine({
      store,
      retention: '3s',
      lease: '30s',
      onEvent: (event) => void events.push(event.type),
    });
    const request = { scope: 'public/payments.create', key: 'order-1', fingerprint: 'f' };
    let charges = 0;
    const charge = () => ++charges;
    let finish!: () => void;
    const slow = engine.execute(request, () => new Promise<number>((resolve) => (finish = () => resolve(charge()))));
    now += 3_500;
    await expect(engine.execute(request, charge)).rejects.toBeInstanceOf(RequestInProgressError);
    now += 1_000;
    finish();
    expect(await slow).toMatchObject({ ok: true, value: 1, replayed: false, generation: 1 });
    now += 2_900;
    expect(await engine.execute(request, charge)).toMatchObject({ value: 1, replayed: true, generation: 1 });
    now += 200;
    expect(await engine.execute(request, charge)).toMatchObject({ value: 2, replayed: false, generation: 2 });
    expect(events.filter((type) => type === 'expiredKeyReused' || type === 'fenced')).toEqual(['expiredKeyReused']);
  });
});
