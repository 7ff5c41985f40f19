import { describe, expect, it } from 'vitest';
import {
  AmbiguousKeyError,
  InvalidKeyError,
  MissingKeyError,
  MemoryStore,
  formatIdempotencyKey,
  parseIdempotencyKey,
} from '@idem/core';
import { createAdapterKit } from '@idem/core/adapter';

describe('parseIdempotencyKey', () => {
  it('K1: accepts a quoted sf-string and a bare value alike', () => {
    expect(parseIdempotencyKey('"8e03978e-40d5-43e8-bc93-6894a57f9324"')).toBe('8e03978e-40d5-43e8-bc93-6894a57f9324');
    expect(parseIdempotencyKey('8e03978e-40d5-43e8-bc93-6894a57f9324')).toBe('8e03978e-40d5-43e8-bc93-6894a57f9324');
  });

  it('K1: trims surrounding whitespace and ignores sf parameters', () => {
    expect(parseIdempotencyKey('   abc  ')).toBe('abc');
    expect(parseIdempotencyKey(' "abc";v=1 ')).toBe('abc');
  });

  it('K3: trims only HTTP white space (SP, HTAB): NBSP, VT and FF around a key are refused', () => {
    expect(parseIdempotencyKey('\t abc \t')).toBe('abc');
    for (const padding of ['\u00a0', '\u000b', '\u000c']) {
      expect(catchError(() => parseIdempotencyKey(`${padding}abc${padding}`))).toMatchObject({
        reason: 'charset',
        status: 400,
      });
    }
  });

  it('K2: treats absent, empty and blank values as no key', () => {
    expect(parseIdempotencyKey(undefined)).toBeUndefined();
    expect(parseIdempotencyKey(null)).toBeUndefined();
    expect(parseIdempotencyKey('')).toBeUndefined();
    expect(parseIdempotencyKey('   ')).toBeUndefined();
  });

  it('K2: an empty quoted string is no key either, as an empty value is', () => {
    expect(parseIdempotencyKey('""')).toBeUndefined();
    expect(parseIdempotencyKey(' "";p=1 ')).toBeUndefined();
    expect(parseIdempotencyKey(['""', 'k'])).toBe('k');
    expect(parseIdempotencyKey('"", "k"')).toBe('k');
  });

  it('K3: accepts 255 characters and refuses 256', () => {
    expect(parseIdempotencyKey('k'.repeat(255))).toHaveLength(255);
    const error = catchError(() => parseIdempotencyKey('k'.repeat(256)));
    expect(error).toBeInstanceOf(InvalidKeyError);
    expect(error).toMatchObject({ reason: 'too_long', status: 400, code: 'idempotency_key_invalid' });
  });

  it.each([
    ['a space', 'a b'],
    ['a tab', 'a\tb'],
    ['non-ASCII', 'clé'],
    ['DEL', 'a\u007f'],
    ['a NUL', 'a\u0000b'],
    ['a backslash', 'a\\b'],
    ['a double quote', 'a"b'],
  ])('K3: refuses %s', (_, value) => {
    expect(catchError(() => parseIdempotencyKey(value))).toMatchObject({ reason: 'charset', status: 400 });
  });

  it('K3: refuses escapes inside a quoted key and malformed quoted strings', () => {
    expect(catchError(() => parseIdempotencyKey('"a\\"b"'))).toBeInstanceOf(InvalidKeyError);
    expect(catchError(() => parseIdempotencyKey('"abc'))).toMatchObject({ reason: 'syntax' });
    expect(catchError(() => parseIdempotencyKey('"a" "b"'))).toMatchObject({ reason: 'syntax' });
  });

  it('K3: refuses several header fields', () => {
    expect(catchError(() => parseIdempotencyKey(['a', 'b']))).toMatchObject({ reason: 'multiple' });
    expect(catchError(() => parseIdempotencyKey('a, b'))).toMatchObject({ reason: 'multiple', status: 400 });
    expect(parseIdempotencyKey(['a'])).toBe('a');
  });
});

describe('the adapter kit: chooseKey', () => {
  const chooseKey = (sources: { header?: string; field?: string }, required: boolean) =>
    createAdapterKit(
      { store: new MemoryStore(), principal: () => 'p', required },
      { name: 'test', field: 'field' },
    ).chooseKey('op', { header: sources.header, field: sources.field });

  it('K4: refuses a header and an argument that differ', () => {
    expect(() => chooseKey({ header: 'a', field: 'b' }, true)).toThrow(AmbiguousKeyError);
    expect(chooseKey({ header: 'a', field: 'a' }, true)).toBe('a');
    expect(chooseKey({ field: 'b' }, true)).toBe('b');
  });

  it('K2: refuses no key where one is required, and runs without one where it is optional', () => {
    expect(() => chooseKey({}, true)).toThrow(MissingKeyError);
    expect(chooseKey({}, false)).toBeUndefined();
  });
});

describe('formatIdempotencyKey', () => {
  it('K1: emits a quoted RFC 9651 sf-string', () => {
    expect(formatIdempotencyKey('8e03978e-40d5')).toBe('"8e03978e-40d5"');
    expect(parseIdempotencyKey(formatIdempotencyKey('a:b/c'))).toBe('a:b/c');
  });

  it('K3: refuses to format a key it would refuse to parse', () => {
    expect(() => formatIdempotencyKey('a b')).toThrow(InvalidKeyError);
  });
});

function catchError(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}
