/**
 * What the GraphQL clients (`@idem/envelop/client`, `/apollo`, `/urql`) read of an operation:
 * its type and root fields, and whether this client keys it with a header key (SPEC K4) — from
 * a request body parsed with `@0no-co/graphql.web` (the small spec-compliant parser urql ships,
 * safe in a browser bundle), or from a document the client already parsed. One reading for the
 * three clients, and the server's: fragments and inline fragments followed, `@skip`/`@include`
 * applied, a variable's value or else its default, as graphql-js coerces them. Internal to the package.
 */
import { parse, type DocumentNode, type OperationDefinitionNode, type ValueNode } from '@0no-co/graphql.web';

/** The root fields a header key covers, or `undefined` when the operation is not one the clients key. */
export interface KeyedMutation {
  /** The root field names, `[]` when a fragment could not be read (the policy's shortest retention applies). */
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
 * A mutation none of whose root fields carries a key of its own — the `argument`, or
 * `@idempotent(key:)`, with a non-empty value — so that a header key beside them is not refused
 * as ambiguous (K4): those keys are the caller's.
 */
export function keyedMutation(
  operation: OperationDescription | undefined,
  argument: string | false,
  variables: Record<string, unknown>,
): KeyedMutation | undefined {
  if (operation?.type !== 'mutation') return undefined;
  const valueIn = (reference: ValueReference | undefined) =>
    reference?.variable === undefined
      ? reference?.literal
      : variables[reference.variable] !== undefined
        ? variables[reference.variable]
        : operation.defaults?.[reference.variable];
  // graphql-js's CollectFields: `@skip(if: true)` or `@include(if: false)` leaves a field out.
  const included = operation.rootFields.filter((field) =>
    (field.conditions ?? []).every(({ skip, ...condition }) => valueIn(condition) !== skip),
  );
  const isKey = (value: unknown) => (typeof value === 'string' && value !== '') || Number.isInteger(value);
  const ownKey = (field: RootField) =>
    isKey(valueIn(field.directiveKey)) || (argument !== false && isKey(valueIn(field.arguments[argument])));
  if (included.some(ownKey)) return undefined;
  const names = [...new Set(included.map((field) => field.name).filter((name) => !name.startsWith('__')))];
  return { rootFields: operation.complete ? names : [] };
}

/** A value as written: a literal, or a variable. */
export interface ValueReference {
  literal?: string | boolean | null;
  variable?: string;
}

/** A root field of an operation, as far as the clients read it. */
export interface RootField {
  name: string;
  /** Arguments whose value is a string or integer literal (as a string), `null`, or a variable. */
  arguments: Record<string, ValueReference & { literal?: string | null }>;
  directives: string[];
  /** The `key` of its `@idempotent` directive, if it has one. */
  directiveKey?: ValueReference;
  /** The `@skip` (`skip: true`) and `@include` conditions on it and on the fragments that reach it. */
  conditions?: Array<ValueReference & { skip: boolean }>;
}

/** What {@link describeOperation} reads of a GraphQL document. */
export interface OperationDescription {
  type: 'query' | 'mutation' | 'subscription';
  /** Every root field as written, through fragments: one entry per occurrence. */
  rootFields: RootField[];
  /** False when a root fragment spread names a fragment the document does not define. */
  complete: boolean;
  /** The variables' default values, where they are literals. */
  defaults?: Record<string, string | boolean | null>;
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
  const fragments = new Map<string, { selectionSet: OperationDefinitionNode['selectionSet'] }>();
  for (const definition of document.definitions)
    if (definition.kind === 'FragmentDefinition') fragments.set(definition.name.value, definition);
  const defaults: Record<string, string | boolean | null> = {};
  for (const definition of chosen.variableDefinitions ?? []) {
    const value = definition.defaultValue && reference(definition.defaultValue).literal;
    if (value !== undefined) defaults[definition.variable.name.value] = value;
  }
  const description: OperationDescription = { type: chosen.operation, rootFields: [], complete: true };
  if (Object.keys(defaults).length > 0) description.defaults = defaults;
  // Fragments on the root type always apply there: validation refuses any other type condition.
  const visit = (
    selectionSet: OperationDefinitionNode['selectionSet'],
    outer: RootField['conditions'],
    seen: Set<string>,
  ) => {
    for (const selection of selectionSet.selections) {
      const conditions = [...(outer ?? []), ...conditionsOf(selection.directives ?? [])];
      if (selection.kind === 'InlineFragment') visit(selection.selectionSet, conditions, seen);
      else if (selection.kind === 'FragmentSpread') {
        const fragment = fragments.get(selection.name.value);
        if (!fragment) description.complete = false;
        else if (!seen.has(selection.name.value))
          visit(fragment.selectionSet, conditions, new Set([...seen, selection.name.value]));
      } else {
        const field: RootField = { name: selection.name.value, arguments: {}, directives: [] };
        if (conditions.length > 0) field.conditions = conditions;
        for (const directive of selection.directives ?? []) {
          field.directives.push(directive.name.value);
          const key = directive.arguments?.find((argument) => argument.name.value === 'key');
          if (directive.name.value === 'idempotent' && key) field.directiveKey = reference(key.value);
        }
        for (const argument of selection.arguments ?? []) {
          const value = reference(argument.value);
          if (value.variable !== undefined || (value.literal !== undefined && typeof value.literal !== 'boolean'))
            field.arguments[argument.name.value] = value as ValueReference & { literal?: string | null };
        }
        description.rootFields.push(field);
      }
    }
  };
  visit(chosen.selectionSet, [], new Set());
  return description;
}

function reference(value: ValueNode): ValueReference {
  switch (value.kind) {
    case 'Variable':
      return { variable: value.name.value };
    case 'StringValue':
    case 'IntValue':
    case 'BooleanValue':
      return { literal: value.value };
    case 'NullValue':
      return { literal: null };
    default:
      return {};
  }
}

function conditionsOf(
  directives: ReadonlyArray<{
    name: { value: string };
    arguments?: ReadonlyArray<{ name: { value: string }; value: ValueNode }>;
  }>,
) {
  return directives.flatMap((directive) => {
    if (directive.name.value !== 'skip' && directive.name.value !== 'include') return [];
    const condition = directive.arguments?.find((argument) => argument.name.value === 'if');
    return condition ? [{ ...reference(condition.value), skip: directive.name.value === 'skip' }] : [];
  });
}
