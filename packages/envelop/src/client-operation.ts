/**
 * What the GraphQL clients (`@idem/envelop/client`, `/apollo`, `/urql`) read of an operation:
 * its type and root fields, and whether this client keys it with a header key (SPEC K4) — from
 * a request body by a small scanner, or from a parsed document. Internal to the package.
 */

/** The root fields a header key covers, or `undefined` when the operation is not one the clients key. */
export interface KeyedMutation {
  /** The root field names, `[]` when some are reached through fragments (the policy's shortest retention applies). */
  rootFields: string[];
}

/** The mutation a `fetch` request runs, or `undefined` when it is not one the clients key. */
export function readMutation(init: RequestInit | undefined, argument: string | false): KeyedMutation | undefined {
  if ((init?.method ?? 'GET').toUpperCase() !== 'POST' || typeof init?.body !== 'string') return undefined;
  let body: { query?: unknown; operationName?: unknown; variables?: unknown };
  try {
    body = JSON.parse(init.body);
  } catch {
    return undefined;
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body) || typeof body.query !== 'string') return undefined;
  const operation = describeOperation(body.query, typeof body.operationName === 'string' ? body.operationName : undefined);
  return keyedMutation(operation, argument, (body.variables ?? {}) as Record<string, unknown>);
}

/**
 * A mutation whose root fields carry no key of their own (the `argument` with a non-empty value,
 * or `@idempotent`): those keys are the caller's, and a header key beside them could be refused
 * as ambiguous (K4).
 */
export function keyedMutation(operation: OperationDescription | undefined, argument: string | false, variables: Record<string, unknown>): KeyedMutation | undefined {
  if (operation?.type !== 'mutation') return undefined;
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
