import { parseItem, serializeItem } from 'structured-headers';
import { InvalidKeyError, MissingKeyError } from './errors.js';

/** K3: the longest key accepted. */
export const MAX_KEY_LENGTH = 255;

/** The header name (draft-ietf-httpapi-idempotency-key-header). */
export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';

/** K4: the field that carries a key per call (a tRPC input field, a GraphQL argument), on servers and clients alike. */
export const DEFAULT_KEY_FIELD = 'idempotencyKey';

/**
 * Where keys travel (K1, K4), in the same words on servers and clients: a server reads them
 * from there (`idempotency()`, `useIdempotency`), a client sends them there (`idempotencyLink`)
 * or knows that a call carrying one there has its own key (the GraphQL clients).
 */
export interface KeyOptions {
  /**
   * K1: the `Idempotency-Key` request header. One header covers one operation: a batched
   * request with several mutations under one header key is refused (400). Defaults to `true`.
   */
  header?: boolean;
  /**
   * K4: the field that carries a key per call — a tRPC input field, a GraphQL argument — or
   * `false` for none. Servers leave it out of the fingerprint (F1); a header key and a field key
   * that differ are refused (400 `idempotency_key_ambiguous`). Defaults to `'idempotencyKey'`.
   */
  field?: string | false;
}

/** E2: the response header that marks a replayed outcome (Stripe's name). */
export const IDEMPOTENT_REPLAYED_HEADER = 'Idempotent-Replayed';

/**
 * E8: the response header that marks a live failure of an `onFailure: 'resume'` endpoint as
 * resumable: the client may retry it with the same key (and payload), and the retry completes the
 * work instead of replaying this failure. A header, because the failure's body is the handler's
 * (not idem's) and a header reaches every client, on every transport, before any body is parsed.
 */
export const IDEMPOTENT_RESUMABLE_HEADER = 'Idempotent-Resumable';

/**
 * Parses an `Idempotency-Key` header leniently (K1–K3): a quoted RFC 9651 sf-string
 * (parameters ignored) or a bare value; surrounding whitespace trimmed.
 *
 * `raw` is what the transport has: the field lines apart (Node's `headersDistinct`) or their
 * combined value (a Fetch `Headers`, Node's `req.headers`: the lines joined with ", "). Both
 * read alike (RFC 9110 §5.3): a comma outside a quoted string separates field lines, and empty
 * lines are ignored, so `['K', '']` and `'K, '` are both the key `K`. A bare key cannot hold a
 * comma; a quoted one can.
 *
 * Returns `undefined` when no key was sent (absent, empty, whitespace only, or an empty quoted
 * string `""`): whether that is an error depends on the endpoint (K2), and a key field may stand in (K4).
 *
 * @throws InvalidKeyError too long (> 255), a character outside 0x21–0x7E, `"` or `\`,
 *   a malformed quoted string, or several non-empty field lines (a bare key with a comma is two).
 */
export function parseIdempotencyKey(raw: string | readonly string[] | null | undefined): string | undefined {
  if (raw === null || raw === undefined) return undefined;
  const lines = typeof raw === 'string' ? [raw] : raw;
  // K2: an empty line and an empty quoted string (`""`) are both no key, so a field key may stand beside them (K4).
  const present = lines
    .flatMap(fieldLines)
    .map(trimOws)
    .filter((line) => line !== '' && !isEmptyString(line));
  if (present.length > 1) throw new InvalidKeyError('multiple', MULTIPLE_VALUES);
  const [value] = present;
  if (value === undefined) return undefined;
  return value.startsWith('"') ? unquote(value) : validateKey(value);
}

/**
 * Why a comma outside quotes is refused (K1, RFC 9110 §5.3): it is how HTTP joins several field
 * lines into one value, so `ab,cd` and the two lines `ab` and `cd` are the same field, and no
 * server can tell which key was meant. A quoted key may hold a comma.
 */
const MULTIPLE_VALUES =
  'The Idempotency-Key field holds more than one value: either several Idempotency-Key header lines were sent, or a bare key contains a comma, which HTTP reads as the separator between field lines (RFC 9110 §5.3). Send one key; a key that contains a comma must be sent quoted, e.g. Idempotency-Key: "ab,cd".';

/** Whether `line` is an sf-string holding nothing (`""`, parameters allowed): no key (K2). */
function isEmptyString(line: string): boolean {
  if (!line.startsWith('""')) return false;
  try {
    return parseItem(line)[0] === '';
  } catch {
    return false;
  }
}

/** The field lines a (possibly combined) field value holds: split at commas outside quoted strings. */
function fieldLines(value: string): string[] {
  const lines: string[] = [];
  let start = 0;
  let quoted = false;
  for (let i = 0; i < value.length; i++) {
    const c = value[i];
    if (quoted && c === '\\') i++;
    else if (c === '"') quoted = !quoted;
    else if (c === ',' && !quoted) {
      lines.push(value.slice(start, i));
      start = i + 1;
    }
  }
  lines.push(value.slice(start));
  return lines;
}

/**
 * Trims what HTTP calls optional white space (RFC 9110 §5.6.3: SP and HTAB) and nothing else:
 * `String.prototype.trim` would also drop VT, FF or NBSP, which are not allowed in a key (K3).
 */
function trimOws(value: string): string {
  return value.replace(/^[ \t]+|[ \t]+$/g, '');
}

/** Validates a key that did not come from a header (an input field or argument, K4). */
export function validateKey(value: string): string {
  if (value === '') throw new MissingKeyError();
  if (value.length > MAX_KEY_LENGTH) {
    throw new InvalidKeyError(
      'too_long',
      `The Idempotency-Key is ${value.length} characters long; at most ${MAX_KEY_LENGTH} are accepted.`,
    );
  }
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c <= 0x20 || c >= 0x7f || c === 0x22 || c === 0x5c) {
      throw new InvalidKeyError(
        'charset',
        'The Idempotency-Key may only contain visible ASCII characters (0x21-0x7E) other than `"` and `\\`.',
      );
    }
  }
  return value;
}

function unquote(input: string): string {
  let item;
  try {
    item = parseItem(input);
  } catch {
    throw new InvalidKeyError(
      'syntax',
      'The Idempotency-Key is not a valid structured-field string (RFC 9651 §3.3.3).',
    );
  }
  const [bare] = item;
  if (typeof bare !== 'string') {
    throw new InvalidKeyError('syntax', 'The Idempotency-Key must be a string.');
  }
  return validateKey(bare);
}

/**
 * Reads a key from an input field or a GraphQL argument (K4): absent, `null` or `''` means no
 * key; a non-string is refused (400); a string is validated as a header value would be (K3).
 */
export function readArgumentKey(value: unknown, name: string): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string')
    throw new InvalidKeyError('syntax', `The \`${name}\` idempotency key must be a string.`);
  return validateKey(value);
}

/** Strict out (K1): a key formatted as an RFC 9651 sf-string, e.g. `"8e03978e-40d5"`. */
export function formatIdempotencyKey(key: string): string {
  return serializeItem(validateKey(key));
}
