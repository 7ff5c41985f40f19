import { describe, expect, it } from 'vitest';
import {
  canonicalize,
  computeFingerprint,
  defaultFingerprint,
  FINGERPRINT_FORMAT_VERSION,
  fingerprintFormatVersion,
} from '@idem/core';

describe('canonicalize / defaultFingerprint (F1)', () => {
  it('F1: is independent of object key order, at every depth', () => {
    const a = { amount: 10, meta: { z: 1, a: [1, { y: 2, x: 1 }] }, currency: 'EUR' };
    const b = { currency: 'EUR', meta: { a: [1, { x: 1, y: 2 }], z: 1 }, amount: 10 };
    expect(canonicalize(a)).toBe(canonicalize(b));
    expect(defaultFingerprint(a)).toBe(defaultFingerprint(b));
    expect(defaultFingerprint(a)).toMatch(/^f1:[0-9a-f]{64}$/);
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

/**
 * Golden vectors of the default fingerprint, format version 1. A stored fingerprint must never
 * change between releases: a retry in flight during a deploy would meet a different fingerprint
 * and get 422. These inputs and their fingerprints are fixed; a change to `canonicalize` that
 * moves any of them needs a new format version (FINGERPRINT_FORMAT_VERSION), not a new vector.
 * The canonical forms are checked too, and the digests against WebCrypto's SHA-256 (not the
 * node:crypto hash the module uses).
 */
const GOLDEN: ReadonlyArray<readonly [name: string, input: () => unknown, canonical: string, fingerprint: string]> = [
  [
    'a flat payment',
    () => ({ amount: 4200, currency: 'EUR' }),
    '{"amount":4200,"currency":"EUR"}',
    'f1:0cee494faadf93e1bd6d1aba298bfe4bfa51eae996c1ad61a7decab66c69a4df',
  ],
  [
    'nested objects, key order, -0, null and booleans',
    () => ({ b: 1, a: { d: [1, 'x', null, true, false], c: -0 } }),
    '{"a":{"c":0,"d":[1,"x",null,true,false]},"b":1}',
    'f1:b1097e030051c26e79ba6e23ef43a7fa5d19612a97bc6267bbc64b7ad8c861fb',
  ],
  [
    'an empty object, array and string',
    () => ({ o: {}, a: [], s: '' }),
    '{"a":[],"o":{},"s":""}',
    'f1:c127f9b3c6f4233b3976f8e2d54486ab15f9a46cfa50fc14ae6d0787d1ac2917',
  ],
  [
    'a Date and an invalid Date',
    () => ({ at: new Date('2026-11-30T09:00:00.000Z'), never: new Date(Number.NaN) }),
    '{"at":{"$date":"2026-11-30T09:00:00.000Z"},"never":{"$date":null}}',
    'f1:0dee960da15dae599ff43b45a09d234a8981309364fa50786273888c7dac9965',
  ],
  [
    'bigints',
    () => ({ n: 12345678901234567890n, m: -1n }),
    '{"m":{"$bigint":"-1"},"n":{"$bigint":"12345678901234567890"}}',
    'f1:32b3064b77e9cf3319b01570255674b7e17dd885a8b917c010ed0cb6d9d04ed1',
  ],
  [
    'a Map with string keys and one with number keys',
    () => ({
      s: new Map<string, unknown>([
        ['b', 1],
        ['a', new Date(0)],
      ]),
      n: new Map([
        [2, 'two'],
        [1, 'one'],
      ]),
    }),
    '{"n":{"$map":[[1,"one"],[2,"two"]]},"s":{"$map":[["a",{"$date":"1970-01-01T00:00:00.000Z"}],["b",1]]}}',
    'f1:5dd5f11d10a99f94ecc3994202f09baadd4f29d8b6ee94eb7873397b1af17faa',
  ],
  [
    'a Set',
    () => new Set(['b', 'a', 3, 'a']),
    '{"$set":["a","b",3]}',
    'f1:1e68446e35d6f2f9b2183a30de2a323dcde2e02a1b74043dd5ee798a35fcc929',
  ],
  [
    'bytes: a Uint8Array and a Buffer',
    () => ({ u: new Uint8Array([0, 1, 254, 255]), b: Buffer.from('héllo', 'utf8') }),
    '{"b":{"$bytes":"aMOpbGxv"},"u":{"$bytes":"AAH+/w=="}}',
    'f1:ce0ca3e9c46a577c208a5a48678cf4b20bb4e39b26f2574453401251ecd5bd16',
  ],
  [
    'non-BMP and non-ASCII keys, sorted by UTF-16 code unit',
    () => ({ '😀': 1, '\u{10000}': 2, z: 3, é: 4, '\uFFFF': 5, Z: 6 }),
    '{"Z":6,"z":3,"\u00e9":4,"\ud800\udc00":2,"\ud83d\ude00":1,"\uffff":5}',
    'f1:21aa68d4cb65a61011d54124cb927d655a536d722d057a2eede0fe160219b05c',
  ],
  [
    'non-finite and large numbers',
    () => [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 1e21, 0.1, -5e-7],
    '[{"$number":"NaN"},{"$number":"Infinity"},{"$number":"-Infinity"},1e+21,0.1,-5e-7]',
    'f1:273b15756f2f12fd03d36274e0dac410074a76cf7120021907f3baa5093f7e79',
  ],
  [
    'undefined, functions and symbols',
    () => ({ a: undefined, b: [undefined, () => 1], c: () => 1, d: Symbol('s') }),
    '{"b":[null,null]}',
    'f1:6015d388d6ff0f80fde8761e8b1870e86210d3ffcc2cd69c904557bc2d4d068d',
  ],
  [
    'toJSON',
    () => ({ value: { toJSON: () => ({ z: 1, y: [2] }) } }),
    '{"value":{"y":[2],"z":1}}',
    'f1:6283eae1516bd93bfbde76cce6bc5c3e42b5113b6e0ba0834bc4ab8d0c362eca',
  ],
  [
    'strings that JSON escapes',
    () => 'line\n"quoted" \\ \u2028 \u0000 😀',
    '"line\\n\\"quoted\\" \\\\ \u2028 \\u0000 \ud83d\ude00"',
    'f1:f1c3893d5611f974a5dc420ef343de784686b6a2dd327b8dd6103c7116469d7d',
  ],
];

describe('F1: the default fingerprint, format version 1, never changes', () => {
  it.each(GOLDEN)('%s', async (_, input, canonical, fingerprint) => {
    expect(canonicalize(input())).toBe(canonical);
    expect(defaultFingerprint(input())).toBe(fingerprint);
    const digest = Buffer.from(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(canonical))).toString(
      'hex',
    );
    expect(fingerprint).toBe(`f1:${digest}`);
    expect(fingerprintFormatVersion(fingerprint)).toBe(FINGERPRINT_FORMAT_VERSION);
  });

  it('F2: the version is read from the default format only; a fingerprint of your own has none', async () => {
    expect(FINGERPRINT_FORMAT_VERSION).toBe(1);
    expect(await computeFingerprint({ amount: 1 }, { fields: ['amount'] })).toMatch(/^f1:[0-9a-f]{64}$/);
    for (const own of ['10', 'f1:abc', 'f0:' + '0'.repeat(64), 'F1:' + '0'.repeat(64), '0'.repeat(64)])
      expect(fingerprintFormatVersion(own)).toBeUndefined();
    expect(fingerprintFormatVersion('f2:' + 'a'.repeat(64))).toBe(2);
  });
});
