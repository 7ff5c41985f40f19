/**
 * @idem/envelop/client — a `fetch` for GraphQL clients (graphql-request, urql, Apollo's
 * HttpLink) that sends each mutation with one `Idempotency-Key`, keeps it across retries, and
 * stops retrying before the server's retention ends (SPEC K1, E3, E5, R2, R4).
 *
 * Nothing here imports the server side or `graphql`: a small scanner reads the operation
 * type and root fields of the request's document.
 */
import {
  createRetentionResolver,
  DEFAULT_KEY_FIELD,
  formatIdempotencyKey,
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
  newIdempotencyKey,
  parseIdempotencyKey,
  parseRetryAfter,
  retryWithinRetention,
  type AttemptResult,
  type KeyOptions,
  type ClientRetryOptions,
  type RetentionSourceOptions,
  type RetryReason,
} from '@idem/core/client';

export {
  RetentionWindowExceededError,
  RetriesExhaustedError,
  UnresolvedOperationError,
  newIdempotencyKey,
  loadRetentionPolicy,
  type ClientRetryOptions,
  type RetryNotice,
} from '@idem/core/client';

type Fetch = (input: RequestInfo | URL, init?: RequestInit) => Promise<Response>;

/**
 * Options of {@link createIdempotentFetch}: the underlying `fetch`, where the retention comes
 * from (`retention` or `policyUrl`, exactly one), and the retry behaviour (`maxAttempts`,
 * `initialDelayMs`, `maxDelayMs`, `safetyMarginMs`, `onRetry`).
 */
export interface IdempotentFetchOptions extends ClientRetryOptions, RetentionSourceOptions {
  /** The `fetch` that sends the requests and reads `policyUrl`. Defaults to `globalThis.fetch`. */
  fetch?: Fetch;
  /**
   * The server's key field, in its words (`key.field`, here the key argument): an operation whose
   * root fields carry their own keys (this argument or `@idempotent(key:)`) is sent as it is,
   * without a header key and without retries. `{ field: false }` when the server reads no
   * argument. Defaults to `{ field: 'idempotencyKey' }`.
   */
  key?: Pick<KeyOptions, 'field'>;
}

/**
 * A `fetch` that makes GraphQL mutations safe to retry. For a `POST` whose JSON body runs a
 * mutation operation it:
 *
 * - adds an `Idempotency-Key` header (a UUID v4 as an sf-string), or keeps the caller's;
 * - retries network failures, 409 (`IDEMPOTENCY_REQUEST_IN_PROGRESS`, E3) and 503
 *   (`IDEMPOTENCY_STORE_UNAVAILABLE`, E5) with the same key, waiting at least `Retry-After`;
 * - returns every other response as it is (400, 422, a replay, 500 included);
 * - starts no retry within the safety margin of the retention of `Mutation.<field>` (from
 *   `retention` or the published policy): it rejects with a `RetentionWindowExceededError`,
 *   telling the caller to reconcile instead.
 *
 * Everything else — queries, `GET`s, batched bodies (a JSON array), non-JSON bodies (file
 * uploads), and mutations whose root fields carry their own argument or directive keys — goes
 * straight to the underlying `fetch`.
 *
 * ```ts
 * const client = new GraphQLClient('https://api.example.com/graphql', { fetch: createIdempotentFetch({ policyUrl: 'https://api.example.com/idempotency' }) });
 * ```
 *
 * @throws TypeError `[idem] …` at once when neither or both of `retention` and `policyUrl` are given.
 */
export function createIdempotentFetch(options: IdempotentFetchOptions): Fetch {
  const { fetch: baseFetch = (input, init) => globalThis.fetch(input, init), retention, policyUrl, key: { field: argument = DEFAULT_KEY_FIELD } = {}, ...retryOptions } = options;
  const resolveRetention = createRetentionResolver({ retention, policyUrl, fetch: baseFetch }, 'createIdempotentFetch');
  const now = retryOptions.now ?? Date.now;

  return async (input, init) => {
    const operation = typeof input === 'string' || input instanceof URL ? readMutation(init, argument) : undefined;
    if (!operation) return baseFetch(input, init);

    const headers = new Headers(init?.headers);
    const key = parseIdempotencyKey(headers.get(IDEMPOTENCY_KEY_HEADER)) ?? newIdempotencyKey();
    headers.set(IDEMPOTENCY_KEY_HEADER, formatIdempotencyKey(key));
    const request: RequestInit = { ...init, headers };
    const signal = init?.signal ?? undefined;
    const retentionMs = await resolveRetention('graphql', operation.rootFields.map((field) => `Mutation.${field}`));

    const attempt = async (): Promise<AttemptResult<Response>> => {
      let response: Response;
      try {
        response = await baseFetch(input, request);
      } catch (error) {
        if (signal?.aborted) throw error;
        return { retry: { reason: 'network' }, error };
      }
      return classifyResponse(response, now);
    };
    return retryWithinRetention(attempt, { ...retryOptions, key, retentionMs, signal });
  };
}

const RETRYABLE_CODES: Record<string, RetryReason> = {
  IDEMPOTENCY_REQUEST_IN_PROGRESS: 'in_progress',
  IDEMPOTENCY_STORE_UNAVAILABLE: 'unavailable',
};

/**
 * 409 and 503 are retried unless they are a replay (a stored outcome, E2) or carry another
 * `extensions.code` than idem's in-progress / store-unavailable codes; any other response is the answer.
 */
async function classifyResponse(response: Response, now: () => number): Promise<AttemptResult<Response>> {
  if ((response.status !== 409 && response.status !== 503) || response.headers.get(IDEMPOTENT_REPLAYED_HEADER) === 'true') return { done: response };
  const text = await response.text();
  const code = errorCode(text);
  const reason = code === undefined ? (response.status === 409 ? 'in_progress' : 'unavailable') : RETRYABLE_CODES[code];
  if (!reason) return { done: new Response(text, { status: response.status, statusText: response.statusText, headers: response.headers }) };
  const retryAfterMs = parseRetryAfter(response.headers.get('retry-after'), now);
  const error = Object.assign(new Error(`[idem] the server answered ${response.status}${code ? ` ${code}` : ''}`), { status: response.status });
  return { retry: retryAfterMs === undefined ? { reason } : { reason, retryAfterMs }, error };
}

function errorCode(body: string): string | undefined {
  try {
    const code = (JSON.parse(body) as { errors?: Array<{ extensions?: { code?: unknown } }> }).errors?.[0]?.extensions?.code;
    return typeof code === 'string' ? code : undefined;
  } catch {
    return undefined;
  }
}

/** The root fields of the mutation a request runs, or `undefined` when it is not one this helper keys. */
function readMutation(init: RequestInit | undefined, argument: string | false): { rootFields: string[] } | undefined {
  if ((init?.method ?? 'GET').toUpperCase() !== 'POST' || typeof init?.body !== 'string') return undefined;
  let body: { query?: unknown; operationName?: unknown; variables?: unknown };
  try {
    body = JSON.parse(init.body);
  } catch {
    return undefined;
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body) || typeof body.query !== 'string') return undefined;
  const operation = describeOperation(body.query, typeof body.operationName === 'string' ? body.operationName : undefined);
  if (operation?.type !== 'mutation') return undefined;
  const variables = (body.variables ?? {}) as Record<string, unknown>;
  if (operation.rootFields.some((field) => carriesOwnKey(field, argument, variables))) return undefined;
  // Fields reached through fragments are unknown: an empty list looks up the shortest retention.
  const names = operation.rootFields.map((field) => field.name).filter((name) => !name.startsWith('__'));
  return { rootFields: operation.complete ? names : [] };
}

function carriesOwnKey(field: RootField, argument: string | false, variables: Record<string, unknown>): boolean {
  if (field.directives.includes('idempotent')) return true;
  if (argument === false) return false;
  const value = field.arguments[argument];
  if (value === undefined) return false;
  const resolved = value.variable === undefined ? value.literal : variables[value.variable];
  return typeof resolved === 'string' && resolved !== '';
}

/** A root field of an operation, as far as the scanner reads it. */
export interface RootField {
  name: string;
  /** Arguments whose value is a string literal or a variable. */
  arguments: Record<string, { literal?: string; variable?: string }>;
  directives: string[];
}

/** What {@link describeOperation} reads of a GraphQL document. */
export interface OperationDescription {
  type: 'query' | 'mutation' | 'subscription';
  rootFields: RootField[];
  /** False when root fields come from fragments, which the scanner does not follow. */
  complete: boolean;
}

/**
 * The type and root fields of the operation a document runs (`operationName`, or its only
 * operation), read by a small scanner instead of a GraphQL parser. `undefined` when the document
 * cannot be read or the operation is not found; the server then answers with its own error.
 */
export function describeOperation(query: string, operationName?: string): OperationDescription | undefined {
  const tokens = tokenize(query);
  if (!tokens) return undefined;
  const operations: Array<OperationDescription & { name?: string }> = [];
  let i = 0;
  const at = (value: string) => tokens[i]?.value === value && tokens[i]?.kind !== 'string';

  const skipBalanced = (): boolean => {
    let depth = 0;
    do {
      const token = tokens[i++];
      if (!token) return false;
      if (token.kind === 'punct' && '([{'.includes(token.value)) depth += 1;
      if (token.kind === 'punct' && ')]}'.includes(token.value)) depth -= 1;
    } while (depth > 0);
    return true;
  };
  const skipDirectives = (seen: string[] = []): boolean => {
    while (at('@')) {
      const name = tokens[i + 1];
      if (name?.kind !== 'name') return false;
      seen.push(name.value);
      i += 2;
      if (at('(') && !skipBalanced()) return false;
    }
    return true;
  };
  const readArguments = (into: RootField['arguments']): boolean => {
    i += 1; // (
    while (!at(')')) {
      const name = tokens[i];
      if (name?.kind !== 'name' || tokens[i + 1]?.value !== ':') return false;
      i += 2;
      const value = tokens[i];
      if (!value) return false;
      if (value.kind === 'punct' && value.value === '$' && tokens[i + 1]?.kind === 'name') {
        into[name.value] = { variable: tokens[i + 1]!.value };
        i += 2;
      } else if (value.kind === 'string') {
        into[name.value] = { literal: value.value };
        i += 1;
      } else if (value.kind === 'punct' && (value.value === '[' || value.value === '{')) {
        if (!skipBalanced()) return false;
      } else i += 1;
    }
    i += 1; // )
    return true;
  };
  const readSelectionSet = (operation: OperationDescription): boolean => {
    i += 1; // {
    while (!at('}')) {
      const token = tokens[i];
      if (!token) return false;
      if (token.kind === 'punct' && token.value === '...') {
        operation.complete = false;
        i += 1;
        if (at('on')) i += 2;
        else if (tokens[i]?.kind === 'name') i += 1;
        if (!skipDirectives()) return false;
        if (at('{') && !skipBalanced()) return false;
        continue;
      }
      if (token.kind !== 'name') return false;
      i += 1;
      let name = token.value;
      if (at(':')) {
        const field = tokens[i + 1];
        if (field?.kind !== 'name') return false;
        name = field.value;
        i += 2;
      }
      const field: RootField = { name, arguments: {}, directives: [] };
      if (at('(') && !readArguments(field.arguments)) return false;
      if (!skipDirectives(field.directives)) return false;
      if (at('{') && !skipBalanced()) return false;
      operation.rootFields.push(field);
    }
    i += 1; // }
    return true;
  };

  while (i < tokens.length) {
    const token = tokens[i]!;
    if (token.kind === 'punct' && token.value === '{') {
      const operation: OperationDescription = { type: 'query', rootFields: [], complete: true };
      if (!readSelectionSet(operation)) return undefined;
      operations.push(operation);
    } else if (token.kind === 'name' && (token.value === 'query' || token.value === 'mutation' || token.value === 'subscription')) {
      const operation: OperationDescription & { name?: string } = { type: token.value as OperationDescription['type'], rootFields: [], complete: true };
      i += 1;
      if (tokens[i]?.kind === 'name') operation.name = tokens[i++]!.value;
      if (at('(') && !skipBalanced()) return undefined;
      if (!skipDirectives() || !at('{') || !readSelectionSet(operation)) return undefined;
      operations.push(operation);
    } else if (token.kind === 'name' && token.value === 'fragment') {
      while (i < tokens.length && !at('{')) i += 1;
      if (!skipBalanced()) return undefined;
    } else return undefined;
  }
  const chosen = operationName === undefined ? (operations.length === 1 ? operations[0] : undefined) : operations.find((operation) => operation.name === operationName);
  if (!chosen) return undefined;
  const { type, rootFields, complete } = chosen;
  return { type, rootFields, complete };
}

interface Token {
  kind: 'name' | 'punct' | 'string' | 'value';
  value: string;
}

const WORD = /[_A-Za-z][_0-9A-Za-z]*|-?[0-9][0-9.eE+-]*/y;

/** GraphQL's lexical grammar, reduced to what the scanner needs; `undefined` on an unterminated string. */
function tokenize(source: string): Token[] | undefined {
  const tokens: Token[] = [];
  let i = 0;
  while (i < source.length) {
    const c = source[i]!;
    if (c === '#') {
      while (i < source.length && source[i] !== '\n' && source[i] !== '\r') i += 1;
    } else if (/[\s,\uFEFF]/.test(c)) {
      i += 1;
    } else if (source.startsWith('"""', i)) {
      let end = i + 3;
      while (end < source.length && !(source.startsWith('"""', end) && source[end - 1] !== '\\')) end += 1;
      if (end >= source.length) return undefined;
      tokens.push({ kind: 'string', value: source.slice(i + 3, end) });
      i = end + 3;
    } else if (c === '"') {
      let end = i + 1;
      while (end < source.length && source[end] !== '"' && source[end] !== '\n') end += source[end] === '\\' ? 2 : 1;
      if (source[end] !== '"') return undefined;
      const raw = source.slice(i, end + 1);
      let value: string;
      try {
        value = JSON.parse(raw) as string;
      } catch {
        value = raw.slice(1, -1);
      }
      tokens.push({ kind: 'string', value });
      i = end + 1;
    } else if (source.startsWith('...', i)) {
      tokens.push({ kind: 'punct', value: '...' });
      i += 3;
    } else if ('!$&()[]{}:=@|'.includes(c)) {
      tokens.push({ kind: 'punct', value: c });
      i += 1;
    } else {
      WORD.lastIndex = i;
      const match = WORD.exec(source);
      if (!match) return undefined;
      tokens.push({ kind: /^[_A-Za-z]/.test(match[0]) ? 'name' : 'value', value: match[0] });
      i += match[0].length;
    }
  }
  return tokens;
}
