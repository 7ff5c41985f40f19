/**
 * Issue 14, item 12: one reading of the `Idempotency-Key` field for every transport. Node's
 * `headersDistinct` hands over the field lines apart; a Fetch `Headers` (and Node's
 * `req.headers`) only the combined value, the lines joined with ", " (RFC 9110 §5.3). Both are
 * the same field, so `parseIdempotencyKey` reads the same key from both.
 */
import { describe, expect, it } from 'vitest';
import { InvalidKeyError, parseIdempotencyKey } from '@idem/core';

/** What a Fetch `Headers` makes of several field lines. */
const combined = (lines: readonly string[]) => lines.map((line) => line.trim()).join(', ');

function readings(lines: readonly string[]): unknown[] {
  return [lines, combined(lines)].map((raw) => {
    try {
      return parseIdempotencyKey(raw);
    } catch (error) {
      return error instanceof InvalidKeyError ? `400 ${error.reason}` : error;
    }
  });
}

describe('parseIdempotencyKey reads the field lines and their combined value alike (item 12)', () => {
  it('K1: two field lines, one of them empty, are the key of the other line, apart or joined', () => {
    expect(readings(['K', ''])).toEqual(['K', 'K']);
    expect(readings(['', '"K"'])).toEqual(['K', 'K']);
    expect(readings(['K', ' ', ''])).toEqual(['K', 'K']);
  });

  it('K1: two non-empty field lines are refused alike, apart or joined', () => {
    expect(readings(['K', 'L'])).toEqual(['400 multiple', '400 multiple']);
    expect(readings(['"K"', '"K"'])).toEqual(['400 multiple', '400 multiple']);
  });

  it('K1: a comma inside a quoted key is part of the key; outside quotes it separates field lines', () => {
    expect(readings(['"a,b"'])).toEqual(['a,b', 'a,b']);
    expect(readings(['"a";p="x,y"', ''])).toEqual(['a', 'a']);
    expect(readings(['a,b'])).toEqual(['400 multiple', '400 multiple']);
    expect(readings(['a,'])).toEqual(['a', 'a']);
  });

  it('K2: field lines that are all empty are no key', () => {
    expect(readings(['', ' '])).toEqual([undefined, undefined]);
    expect(readings([','])).toEqual([undefined, undefined]);
  });

  it('K1: a bare key with a comma is refused with a message that says why and shows the quoted form', () => {
    for (const raw of ['ab,cd', ['ab', 'cd']]) {
      const error = (() => {
        try {
          return parseIdempotencyKey(raw);
        } catch (caught) {
          return caught;
        }
      })();
      expect(error).toBeInstanceOf(InvalidKeyError);
      expect((error as InvalidKeyError).reason).toBe('multiple');
      expect((error as Error).message).toContain('a bare key contains a comma');
      expect((error as Error).message).toContain('RFC 9110');
      expect((error as Error).message).toContain('Idempotency-Key: "ab,cd"');
    }
    expect(parseIdempotencyKey('"ab,cd"')).toBe('ab,cd');
  });
});
