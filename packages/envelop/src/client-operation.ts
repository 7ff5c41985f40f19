/**
 * What the GraphQL clients (`@idem/envelop/client`, `/apollo`, `/urql`) read of an operation:
 * its type and root fields, and whether this client keys it with a header key (SPEC K4) — from
 * a request body parsed with `@0no-co/graphql.web` (the small spec-compliant parser urql ships,
 * safe in a browser bundle), or from a document the client already parsed. Internal to the package.
 */
import { parse, type DocumentNode, type OperationDefinitionNode } from '@0no-co/graphql.web';

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
  if (body === null || typeof body !== 'object' || Array.isArray(body) || typeof body.query !== 'string')
    return undefined;
  const operation = describeOperation(
    body.query,
    typeof body.operationName === 'string' ? body.operationName : undefined,
  );
  return keyedMutation(operation, argument, (body.variables ?? {}) as Record<string, unknown>);
}

/**
 * A mutation whose root fields carry no key of their own (the `argument` with a non-empty value,
 * or `@idempotent`): those keys are the caller's, and a header key beside them could be refused
 * as ambiguous (K4).
 */
export function keyedMutation(
  operation: OperationDescription | undefined,
  argument: string | false,
  variables: Record<string, unknown>,
): KeyedMutation | undefined {
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

/** A root field of an operation, as far as the clients read it. */
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
  /** False when root fields come from fragments, which the clients do not follow. */
  complete: boolean;
}

/**
 * The type and root fields of the operation a document runs (`operationName`, or its only
 * operation). `undefined` when the document does not parse or the operation is not found; the
 * server then answers with its own error.
 */
export function describeOperation(query: string, operationName?: string): OperationDescription | undefined {
  let document: DocumentNode;
  try {
    document = parse(query, { noLocation: true });
  } catch {
    return undefined;
  }
  return describeDocument(document, operationName);
}

/** {@link describeOperation} of a parsed document (Apollo and urql hand the link one). */
export function describeDocument(
  document: DocumentNode,
  operationName: string | undefined,
): OperationDescription | undefined {
  const operations = document.definitions.filter(
    (definition): definition is OperationDefinitionNode => definition.kind === 'OperationDefinition',
  );
  const chosen =
    operationName === undefined
      ? operations.length === 1
        ? operations[0]
        : undefined
      : operations.find((operation) => operation.name?.value === operationName);
  if (!chosen) return undefined;
  const description: OperationDescription = { type: chosen.operation, rootFields: [], complete: true };
  for (const selection of chosen.selectionSet.selections) {
    if (selection.kind !== 'Field') {
      description.complete = false;
      continue;
    }
    const field: RootField = {
      name: selection.name.value,
      arguments: {},
      directives: (selection.directives ?? []).map((directive) => directive.name.value),
    };
    for (const argument of selection.arguments ?? []) {
      if (argument.value.kind === 'Variable')
        field.arguments[argument.name.value] = { variable: argument.value.name.value };
      else if (argument.value.kind === 'StringValue')
        field.arguments[argument.name.value] = { literal: argument.value.value };
    }
    description.rootFields.push(field);
  }
  return description;
}
