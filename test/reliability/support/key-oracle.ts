/**
 * What SPEC K1–K3 say a server must do with an `Idempotency-Key`, written from the rules and
 * RFC 9651 (§4.2.3 items, §4.2.5 strings), independently of `@idem/core`'s parser, so the fuzz
 * compares two readings of the spec:
 *
 * - surrounding whitespace (OWS: SP and HTAB) is trimmed; empty means no key (K2: 400 missing);
 * - a value starting with `"` is an sf-string item, parameters ignored; anything else a bare value;
 * - the key: 1–255 characters, each visible ASCII (0x21–0x7E) other than `"` and `\` (K3);
 * - several non-empty header fields: 400. A comma outside a quoted string separates field lines
 *   (RFC 9110 §5.3: several lines and their comma-joined value are one field), and empty lines
 *   are ignored, so the lines apart and joined read alike.
 *
 * Where the oracle cannot tell (parameter values of the rarer RFC 9651 types, and
 * whitespace JavaScript's `trim()` removes but HTTP does not) it says so instead of guessing.
 */

export type Expectation =
  | { kind: 'accepted'; key: string }
  | { kind: 'rejected' }
  /** Either answer is right; a 200 must carry one of `keys`. */
  | { kind: 'either'; keys: string[]; why: 'rare-parameter' };

const MAX_KEY_LENGTH = 255;
const OWS = /^[ \t]+|[ \t]+$/g;
/** What a Fetch `Headers` strips from a value (HTTP whitespace). */
const HTTP_WHITESPACE = /^[\t\n\r ]+|[\t\n\r ]+$/g;

const accepted = (key: string): Expectation => ({ kind: 'accepted', key });
const rejected: Expectation = { kind: 'rejected' };

/** K3, on a key from any source. */
export function validate(key: string): Expectation {
  if (key.length === 0 || key.length > MAX_KEY_LENGTH) return rejected;
  for (const char of key) {
    const code = char.codePointAt(0)!;
    if (code < 0x21 || code > 0x7e || char === '"' || char === '\\') return rejected;
  }
  return accepted(key);
}

/** K4: a key from a tRPC input field or a GraphQL argument: `''` is no key (400 on a required endpoint); never trimmed. */
export function expectArgumentKey(value: string): Expectation {
  return value === '' ? rejected : validate(value);
}

/** One header field value (already combined, if the transport combines). */
export function expectHeaderValue(raw: string): Expectation {
  // Only OWS (SP, HTAB) is trimmed: VT, FF, NBSP around a key are characters outside K3's set.
  // K2: an empty line and an empty sf-string (`""`) are no key; any other line counts.
  const present = splitAtCommas(raw)
    .map((line) => line.replace(OWS, ''))
    .filter((line) => line !== '' && !isEmptyString(line));
  if (present.length > 1) return rejected;
  return parseValue(present[0] ?? '');
}

/** A line that is an sf-string item holding the empty string, parameters allowed. */
function isEmptyString(line: string): boolean {
  const item = parseStringItem(line);
  return item !== undefined && item.value === '' && !item.rare;
}

/** Several header fields, kept apart (Node's `headersDistinct`, as @idem/trpc reads them): the same field as their joined value. */
export function expectDistinctFields(fields: readonly string[]): Expectation {
  return expectHeaderValue(fields.join(','));
}

/** The comma-separated members of a field value; a comma inside an sf-string (`\"` escapes kept) does not separate. */
function splitAtCommas(value: string): string[] {
  const members: string[] = [];
  let member = '';
  let inString = false;
  for (let pos = 0; pos < value.length; pos++) {
    const char = value[pos]!;
    if (!inString && char === ',') {
      members.push(member);
      member = '';
      continue;
    }
    member += char;
    if (inString && char === '\\' && pos + 1 < value.length) member += value[++pos];
    else if (char === '"') inString = !inString;
  }
  members.push(member);
  return members;
}

/** Several header fields as Fetch `Headers` (and Node's `req.headers`) combine them: each trimmed, joined with ", ". */
export function combineFields(fields: readonly string[], strip: RegExp = HTTP_WHITESPACE): string {
  return fields.map((field) => field.replace(strip, '')).join(', ');
}

function parseValue(value: string): Expectation {
  if (value === '') return rejected;
  if (!value.startsWith('"')) return validate(value);
  return parseQuotedItem(value);
}

/** RFC 9651 §4.2.3 for an item whose bare item is a string; parameters are parsed and dropped. */
function parseQuotedItem(input: string): Expectation {
  const item = parseStringItem(input);
  if (!item) return rejected;
  const key = item.value === '' ? rejected : validate(item.value);
  if (!item.rare) return key;
  return { kind: 'either', keys: key.kind === 'accepted' ? [key.key] : [], why: 'rare-parameter' };
}

/**
 * The string of an sf-string item, or undefined when `input` is not one. `rare`: a parameter
 * value of a type this oracle does not parse, after which the rest is not checked.
 */
function parseStringItem(input: string): { value: string; rare: boolean } | undefined {
  const string = parseString(input, 0);
  if (!string) return undefined;
  let pos = string.end;
  let rare = false;
  while (input[pos] === ';') {
    pos++;
    while (input[pos] === ' ') pos++;
    if (!/^[a-z*]$/.test(input[pos] ?? '')) return undefined;
    while (/^[a-z0-9_\-.*]$/.test(input[pos] ?? '')) pos++;
    if (input[pos] !== '=') continue;
    pos++;
    const first = input[pos];
    if (first === ':' || first === '@' || first === '%') {
      // Byte sequence, date, display string: not worth a second implementation here.
      rare = true;
      break;
    }
    const end = parseBareItem(input, pos);
    if (end === undefined) return undefined;
    pos = end;
  }
  if (!rare) {
    while (input[pos] === ' ') pos++;
    if (pos !== input.length) return undefined;
  }
  return { value: string.value, rare };
}

/** §4.2.5: `"`, then printable ASCII with `\"` and `\\` escapes, then `"`. */
function parseString(input: string, start: number): { value: string; end: number } | undefined {
  if (input[start] !== '"') return undefined;
  let value = '';
  for (let pos = start + 1; pos < input.length; pos++) {
    const char = input[pos]!;
    if (char === '\\') {
      const next = input[++pos];
      if (next !== '"' && next !== '\\') return undefined;
      value += next;
    } else if (char === '"') {
      return { value, end: pos + 1 };
    } else {
      const code = char.charCodeAt(0);
      if (code < 0x20 || code > 0x7e) return undefined;
      value += char;
    }
  }
  return undefined;
}

/** §4.2.3.1 for integers, decimals, strings, tokens and booleans; returns where the item ends. */
function parseBareItem(input: string, pos: number): number | undefined {
  const char = input[pos];
  if (char === undefined) return undefined;
  if (/^[-0-9]$/.test(char)) return parseNumber(input, pos);
  if (char === '"') return parseString(input, pos)?.end;
  if (/^[A-Za-z*]$/.test(char)) {
    let end = pos + 1;
    while (/^[:/!#$%&'*+\-.^_`|~A-Za-z0-9]$/.test(input[end] ?? '')) end++;
    return end;
  }
  if (char === '?') return input[pos + 1] === '0' || input[pos + 1] === '1' ? pos + 2 : undefined;
  return undefined;
}

/** §4.2.4: at most 15 integer digits; a decimal has at most 12 before and 1–3 after the point. */
function parseNumber(input: string, start: number): number | undefined {
  let pos = start;
  if (input[pos] === '-') pos++;
  if (!/^[0-9]$/.test(input[pos] ?? '')) return undefined;
  let digits = '';
  let decimal = false;
  for (; pos < input.length; pos++) {
    const char = input[pos]!;
    if (/^[0-9]$/.test(char)) digits += char;
    else if (!decimal && char === '.') {
      if (digits.length > 12) return undefined;
      digits += '.';
      decimal = true;
    } else break;
    if (!decimal && digits.length > 15) return undefined;
    if (decimal && digits.length > 16) return undefined;
  }
  if (decimal && (digits.endsWith('.') || digits.split('.')[1]!.length > 3)) return undefined;
  return pos;
}
