/**
 * fast-check generators of `Idempotency-Key` values: bare and quoted (with escapes, broken
 * escapes, parameters), control characters, non-ASCII, lengths 0–400 with the 255 boundary
 * well covered, comma lists, surrounding whitespace. Each transport gets the characters it can
 * carry: a Fetch `Headers` takes Latin-1 without NUL/CR/LF, `http.request` visible ASCII, SP,
 * HTAB and raw bytes 0x80–0xFF (UTF-8 of any text), a JSON body anything.
 */
import fc from 'fast-check';

const char = (min: number, max: number) => fc.integer({ min, max }).map((code) => String.fromCharCode(code));
const keyChar = char(0x21, 0x7e).filter((c) => c !== '"' && c !== '\\');
const syntax = fc.constantFrom('"', '\\', ',', ';', '=', ' ', ':', '@', '%', '?', '*', '(', ')');
const ows = fc.constantFrom(' ', '\t');
/** Whitespace to `String.prototype.trim`, not to HTTP: VT, FF, NBSP. */
const jsOnlyWhitespace = fc.constantFrom('\x0B', '\x0C', '\u00A0');
const controlInHeaders = fc.oneof(char(0x01, 0x08), char(0x0b, 0x0c), char(0x0e, 0x1f), fc.constant('\x7f'));
const anyControl = fc.oneof(char(0x00, 0x1f), fc.constant('\x7f'));
const latin1 = char(0x80, 0xff);
const bmp = fc
  .integer({ min: 0x100, max: 0xfffd })
  .filter((code) => code < 0xd800 || code > 0xdfff)
  .map((code) => String.fromCharCode(code));
const astral = fc.integer({ min: 0x10000, max: 0x10ffff }).map((code) => String.fromCodePoint(code));
const loneSurrogate = char(0xd800, 0xdfff);

/** Characters a Fetch `Headers` value may hold. */
export const fetchHeaderChar = fc.oneof(
  { weight: 24, arbitrary: keyChar },
  { weight: 4, arbitrary: syntax },
  { weight: 1, arbitrary: ows },
  { weight: 1, arbitrary: controlInHeaders },
  { weight: 1, arbitrary: latin1 },
  { weight: 1, arbitrary: jsOnlyWhitespace },
);

/** Characters of text sent over HTTP as UTF-8 (see {@link toWire}). */
export const httpTextChar = fc.oneof(
  { weight: 24, arbitrary: keyChar },
  { weight: 4, arbitrary: syntax },
  { weight: 1, arbitrary: ows },
  { weight: 1, arbitrary: latin1 },
  { weight: 1, arbitrary: bmp },
  { weight: 1, arbitrary: astral },
);

/** Anything a JSON string holds. */
export const jsonChar = fc.oneof(
  { weight: 24, arbitrary: keyChar },
  { weight: 4, arbitrary: syntax },
  { weight: 1, arbitrary: ows },
  { weight: 1, arbitrary: anyControl },
  { weight: 1, arbitrary: latin1 },
  { weight: 1, arbitrary: bmp },
  { weight: 1, arbitrary: astral },
  { weight: 1, arbitrary: loneSurrogate },
  { weight: 1, arbitrary: jsOnlyWhitespace },
);

/** Text over `unit`, of every length from 0 to 400: mostly short, often around 255, sometimes long. */
export function text(unit: fc.Arbitrary<string>): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 6, arbitrary: fc.string({ unit, maxLength: 40 }) },
    { weight: 2, arbitrary: fc.string({ unit: keyChar, minLength: 250, maxLength: 260 }) },
    { weight: 1, arbitrary: fc.string({ unit, minLength: 240, maxLength: 270 }) },
    { weight: 1, arbitrary: fc.string({ unit, maxLength: 400, size: 'max' }) },
  );
}

/** RFC 9651 parameters after a string item: valid, invalid and the rarer types. */
const parameters = fc
  .array(
    fc.tuple(
      fc.constantFrom('', ' '),
      fc.constantFrom('a', 'b1', '*x', 'k-_.*', 'A', '1a', ''),
      fc.constantFrom(
        '',
        '=1',
        '=-2.5',
        '=1.2345',
        '=1234567890123456',
        '="v"',
        '="v',
        '=tok/en',
        '=?1',
        '=?2',
        '=',
        '=:aGk=:',
        '=@1700000000',
        '=%"x"',
      ),
    ),
    { maxLength: 3 },
  )
  .map((entries) => entries.map(([space, key, value]) => `;${space}${key}${value}`).join(''));

/** `inner` as an sf-string: `"` and `\` escaped, then maybe broken (no closing quote, a bad escape). */
function quoted(inner: fc.Arbitrary<string>): fc.Arbitrary<string> {
  return fc
    .tuple(inner, parameters, fc.constantFrom('ok', 'ok', 'ok', 'unterminated', 'bad-escape', 'raw-quote', 'trailing'))
    .map(([value, params, damage]) => {
      const escaped = value.replace(/[\\"]/g, (c) => `\\${c}`);
      switch (damage) {
        case 'unterminated':
          return `"${escaped}`;
        case 'bad-escape':
          return `"${escaped}\\x"${params}`;
        case 'raw-quote':
          return `"${value}"${params}`;
        case 'trailing':
          return `"${escaped}"${params} junk`;
        default:
          return `"${escaped}"${params}`;
      }
    });
}

/** One header value: bare or quoted, a comma list, maybe wrapped in whitespace. */
export function headerValue(unit: fc.Arbitrary<string>, whitespace: fc.Arbitrary<string> = ows): fc.Arbitrary<string> {
  const single = fc.oneof({ weight: 3, arbitrary: text(unit) }, { weight: 2, arbitrary: quoted(text(unit)) });
  const list = fc
    .tuple(
      fc.array(
        fc.oneof(fc.string({ unit: keyChar, maxLength: 12 }), quoted(fc.string({ unit: keyChar, maxLength: 12 }))),
        { minLength: 2, maxLength: 4 },
      ),
      fc.constantFrom(',', ', ', ' ,'),
    )
    .map(([items, separator]) => items.join(separator));
  const pad = fc.string({ unit: whitespace, maxLength: 3 });
  return fc
    .tuple(pad, fc.oneof({ weight: 5, arbitrary: single }, { weight: 1, arbitrary: list }), pad)
    .map(([before, value, after]) => `${before}${value}${after}`);
}

/** Header values for a Fetch `Headers`. */
export const fetchHeaderValue = headerValue(
  fetchHeaderChar,
  fc.oneof({ weight: 3, arbitrary: ows }, { weight: 1, arbitrary: jsOnlyWhitespace }),
);

/** Text → the Latin-1 string whose bytes are its UTF-8: `http.request` sends those bytes as they are. */
export const toWire = (value: string) => Buffer.from(value, 'utf8').toString('latin1');

/** Single bytes `http.request` may send in a header value: visible ASCII, SP, HTAB, obs-text (0x80–0xFF). */
const wireByte = fc.oneof(
  { weight: 24, arbitrary: keyChar },
  { weight: 4, arbitrary: syntax },
  { weight: 1, arbitrary: ows },
  { weight: 2, arbitrary: latin1 },
);

/**
 * Header values as `http.request` puts them on the wire (one character, one byte): any text as
 * UTF-8, or raw bytes, obs-text such as a lone 0xA0 (NBSP in Latin-1) included.
 */
export const httpHeaderWire = fc.oneof(
  { weight: 2, arbitrary: headerValue(httpTextChar).map(toWire) },
  {
    weight: 1,
    arbitrary: headerValue(
      wireByte,
      fc.oneof({ weight: 3, arbitrary: ows }, { weight: 1, arbitrary: fc.constant('\u00A0') }),
    ),
  },
);

/** Keys in a JSON body (tRPC input field, GraphQL argument): any string. */
export const jsonKey = fc.oneof(
  { weight: 3, arbitrary: text(jsonChar) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 300 }) },
);
