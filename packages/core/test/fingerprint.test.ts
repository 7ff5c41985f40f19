import { describe, expect, it } from 'vitest';
import { canonicalize, computeFingerprint, defaultFingerprint } from '@idem/core';

describe('canonicalize / defaultFingerprint (F1)', () => {
  it('F1: is independent of object key order, at every depth', () => {
    const a = { amount: 10, meta: { z: 1, a: [1, { y: 2, x: 1 }] }, currency: 'EUR' };
    const b = { currency: 'EUR', meta: { a: [1, { x: 1, y: 2 }], z: 1 }, amount: 10 };
    expect(canonicalize(a)).toBe(canonicalize(b));
    expect(defaultFingerprint(a)).toBe(defaultFingerprint(b));
    expect(defaultFingerprint(a)).toMatch(/^[0-9a-f]{64}$/);
  });

  it('F1: keeps array order meaningful', () => {
    expect(defaultFingerprint([1, 2])).not.toBe(defaultFingerprint([2, 1]));
  });

  it('F1: leaves out undefined properties and writes undefined array items as null', () => {
    expect(canonicalize({ a: 1, b: undefined })).toBe(canonicalize({ a: 1 }));
    expect(canonicalize([undefined, 1])).toBe('[null,1]');
  });

  it('F1: tells a Date from its ISO string, and a bigint from a number', () => {
    const date = new Date('2026-11-30T00:00:00.000Z');
    expect(canonicalize(date)).toBe('{"$date":"2026-11-30T00:00:00.000Z"}');
    expect(defaultFingerprint({ at: date })).not.toBe(defaultFingerprint({ at: date.toISOString() }));
    expect(canonicalize(12n)).toBe('{"$bigint":"12"}');
    expect(defaultFingerprint({ n: 12n })).not.toBe(defaultFingerprint({ n: 12 }));
  });

  it('F1: orders Map and Set entries, and encodes bytes and non-finite numbers', () => {
    expect(
      canonicalize(
        new Map([
          ['b', 1],
          ['a', 2],
        ]),
      ),
    ).toBe(
      canonicalize(
        new Map([
          ['a', 2],
          ['b', 1],
        ]),
      ),
    );
    expect(canonicalize(new Set([2, 1]))).toBe('{"$set":[1,2]}');
    expect(canonicalize(new Uint8Array([1, 2]))).toBe('{"$bytes":"AQI="}');
    expect(canonicalize(Number.NaN)).toBe('{"$number":"NaN"}');
    expect(canonicalize(-0)).toBe('0');
  });

  it('F1: refuses a cycle with a TypeError', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => canonicalize(cyclic)).toThrow(TypeError);
  });
});

describe('computeFingerprint (F2)', () => {
  const input = { amount: 10, currency: 'EUR', note: 'x', idempotencyKey: 'k1' };

  it('F1: excludes the key field from the fingerprint', async () => {
    const a = await computeFingerprint(input, 'default', ['idempotencyKey']);
    const b = await computeFingerprint({ ...input, idempotencyKey: 'k2' }, 'default', ['idempotencyKey']);
    expect(a).toBe(b);
  });

  it('F2: selected fields ignore the others', async () => {
    const option = { fields: ['amount', 'currency'] };
    expect(await computeFingerprint(input, option)).toBe(await computeFingerprint({ ...input, note: 'y' }, option));
    expect(await computeFingerprint(input, option)).not.toBe(
      await computeFingerprint({ ...input, amount: 11 }, option),
    );
  });

  it('F2: a custom function, and none', async () => {
    expect(await computeFingerprint(input, (value) => String((value as typeof input).amount))).toBe('10');
    expect(await computeFingerprint(input, false)).toBeNull();
  });
});
