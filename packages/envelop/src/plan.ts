/**
 * The key plan of a mutation operation (SPEC K2, K4, E4): which unit each root field belongs to
 * and under which key, decided before anything executes, from graphql-js's own readings — the
 * variables as `getVariableValues` coerces them, the root fields as execution's `collectFields`
 * collects them (aliases, fragments, `@include`/`@skip`), and each key as `getArgumentValues` /
 * `getDirectiveValues` coerce it. A plan is complete or it is an answer that executes nothing.
 */
import {
  getArgumentValues,
  getDirectiveValues,
  getVariableValues,
  GraphQLError,
  Kind,
  type ExecutionArgs,
  type FieldNode,
  type FragmentDefinitionNode,
  type GraphQLDirective,
  type GraphQLField,
  type GraphQLObjectType,
  type OperationDefinitionNode,
} from 'graphql';
// graphql 16 exports execution's field collection from this path only (`@internal`): this is
// the one import of it, pinned by test/plan.test.ts. Node resolves `graphql` to the same CJS build.
import { collectFields } from 'graphql/execution/collectFields.js';
import { AmbiguousKeyError, isIdempotencyError, MissingKeyError, type IdempotencyError } from '@idem/core';
import type { AdapterKit } from '@idem/core/adapter';

/** One entry of the root selection set, as graphql-js executes it. `definition` is undefined for `__typename`. */
export interface RootField {
  responseKey: string;
  fieldName: string;
  nodes: readonly FieldNode[];
  definition: GraphQLField<unknown, unknown> | undefined;
}

/** A root field of the field unit: its key, and its arguments as graphql-js coerces them. */
export interface KeyedField extends RootField {
  definition: GraphQLField<unknown, unknown>;
  key: string;
  arguments: Record<string, unknown>;
}

export type KeyPlan =
  | { unit: 'none' }
  | { unit: 'operation'; key: string }
  | { unit: 'field'; fields: ReadonlyArray<KeyedField | RootField> }
  /** K2/K4 refusal: 400, nothing executed. */
  | { unit: 'refused'; error: IdempotencyError }
  /** What graphql-js answers for this request when it executes nothing (a request error). */
  | { unit: 'unexecutable'; result: { errors: readonly GraphQLError[]; data?: null } };

export interface PlannedOperation {
  plan: KeyPlan;
  rootFields: RootField[];
  fragments: Record<string, FragmentDefinitionNode>;
  variables: Record<string, unknown>;
}

export interface KeySources {
  kit: Pick<AdapterKit<unknown>, 'key' | 'fieldKey' | 'chooseKey' | 'isRequired'>;
  /** The parsed `Idempotency-Key` header, if it is read and was sent. */
  header: string | undefined;
  /** The `@idempotent` directive, when directive keys are on and the schema declares it. */
  directive: GraphQLDirective | undefined;
  /** Names schema coordinates in messages (`Mutation`). */
  rootTypeName: string;
}

/**
 * Plans `operation` (a mutation of `rootType`). A key that does not coerce — an argument or
 * directive value graphql-js refuses — cannot be known, so the request is answered with
 * graphql-js's error and nothing runs; so is a field key whose other arguments do not coerce,
 * since its fingerprint is made of them (F1). Refusals: a required key missing (K2), two keys
 * for one field (K4), a field of the field unit without a key, two root fields on one record.
 */
export function planOperation(
  args: ExecutionArgs,
  operation: OperationDefinitionNode,
  rootType: GraphQLObjectType,
  sources: Omit<KeySources, 'rootTypeName'>,
): PlannedOperation {
  const fragments: Record<string, FragmentDefinitionNode> = Object.create(null);
  for (const definition of args.document.definitions)
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments[definition.name.value] = definition;
  const coerced = getVariableValues(args.schema, operation.variableDefinitions ?? [], args.variableValues ?? {}, {
    maxErrors: args.options?.maxCoercionErrors ?? 50,
    hideSuggestions: args.hideSuggestions ?? false,
  });
  if (coerced.errors)
    return { plan: unexecutable({ errors: coerced.errors }), rootFields: [], fragments, variables: {} };
  const variables = coerced.coerced;
  const rootFields: RootField[] = [];
  try {
    const definitions = rootType.getFields();
    for (const [responseKey, nodes] of collectFields(
      args.schema,
      fragments,
      variables,
      rootType,
      operation.selectionSet,
    ))
      rootFields.push({
        responseKey,
        fieldName: nodes[0]!.name.value,
        nodes,
        definition: definitions[nodes[0]!.name.value],
      });
  } catch (error) {
    // graphql-js fails the whole operation there, before any field: `{ errors, data: null }`.
    if (error instanceof GraphQLError)
      return { plan: unexecutable({ errors: [error], data: null }), rootFields, fragments, variables };
    throw error;
  }
  const planned = { rootFields, fragments, variables };
  try {
    return { ...planned, plan: planKeys(rootFields, variables, { ...sources, rootTypeName: rootType.name }) };
  } catch (error) {
    if (error instanceof GraphQLError) return { ...planned, plan: unexecutable({ errors: [asRequestError(error)] }) };
    if (isIdempotencyError(error)) return { ...planned, plan: { unit: 'refused', error } };
    throw error;
  }
}

function planKeys(rootFields: readonly RootField[], variables: Record<string, unknown>, sources: KeySources): KeyPlan {
  const { kit, header } = sources;
  const ownKeys = rootFields.map((field) => ownKey(field, variables, sources));
  if (ownKeys.every((key) => key === undefined)) {
    if (header !== undefined) return { unit: 'operation', key: header };
    const unkeyed = rootFields.find((field) => field.definition && kit.isRequired(field.fieldName));
    if (unkeyed) throw missingKey(unkeyed, sources);
    return { unit: 'none' };
  }
  const records = new Set<string>();
  const fields = rootFields.map((field, index): KeyedField | RootField => {
    if (!field.definition) return field;
    const key = chooseKey(field, ownKeys[index], sources);
    // E4: one key identifies one unit — two root fields never share a stored outcome.
    const record = JSON.stringify([field.fieldName, key]);
    if (records.has(record))
      throw new AmbiguousKeyError(
        `Two root fields of this operation would be one record (${sources.rootTypeName}.${field.fieldName} under one key), so one key would answer for both; give each its own key.`,
      );
    records.add(record);
    return { ...field, definition: field.definition, key, arguments: coerceArguments(field, variables) };
  });
  return { unit: 'field', fields };
}

/** K4, K2: the key of a root field of the field unit, from the header and its own key; every one needs a key. */
function chooseKey(field: RootField, own: string | undefined, sources: KeySources): string {
  const key = sources.kit.chooseKey(field.fieldName, { header: sources.header, field: own });
  if (key === undefined) throw missingKey(field, sources);
  return key;
}

/** The key a root field carries in its key argument or `@idempotent(key:)` (K4), coerced by graphql-js. */
function ownKey(field: RootField, variables: Record<string, unknown>, { kit, directive, rootTypeName }: KeySources) {
  const { definition, nodes, fieldName } = field;
  if (!definition) return undefined;
  const found = new Set<string>();
  const argument = definition.args.find((arg) => arg.name === kit.key.field);
  if (argument) {
    const key = kit.fieldKey(
      getArgumentValues({ ...definition, args: [argument] }, nodes[0]!, variables)[argument.name],
    );
    if (key !== undefined) found.add(key);
  }
  for (const node of directive ? nodes : []) {
    const key = kit.fieldKey(getDirectiveValues(directive!, node, variables)?.['key'], '@idempotent(key:)');
    if (key !== undefined) found.add(key);
  }
  if (found.size > 1)
    throw new AmbiguousKeyError(
      `${rootTypeName}.${fieldName} carries two different idempotency keys (argument and @idempotent directive); send one key.`,
    );
  return found.values().next().value;
}

/** A keyed field's arguments as graphql-js coerces them for its resolver. */
function coerceArguments(field: RootField, variables: Record<string, unknown>): Record<string, unknown> {
  return getArgumentValues(field.definition!, field.nodes[0]!, variables);
}

/** K2: a required field without a key, or a field of the field unit without one (every one then needs a key). */
function missingKey(field: RootField, { kit, directive, rootTypeName }: KeySources): MissingKeyError {
  const ways = [
    kit.key.header ? 'an Idempotency-Key header' : null,
    field.definition?.args.some((arg) => arg.name === kit.key.field) ? `an \`${kit.key.field}\` argument` : null,
    directive ? 'an @idempotent(key:) directive' : null,
  ].filter((way): way is string => way !== null);
  const send =
    ways.length === 0 ? 'a key' : ways.length === 1 ? ways[0] : `${ways.slice(0, -1).join(', ')} or ${ways.at(-1)}`;
  const what = kit.isRequired(field.fieldName)
    ? 'is idempotent and requires a key'
    : 'has no key, while other root fields of this operation carry their own';
  return new MissingKeyError(`${rootTypeName}.${field.fieldName} ${what}: send ${send}.`);
}

function unexecutable(result: { errors: readonly GraphQLError[]; data?: null }): KeyPlan {
  return { unit: 'unexecutable', result };
}

/**
 * A request error (GraphQL over HTTP): the response has no `data`, and its status is 400 for
 * `application/graphql-response+json` and 200 for `application/json` (Yoga's `spec` flag).
 */
function asRequestError(error: GraphQLError): GraphQLError {
  return new GraphQLError(error.message, {
    nodes: error.nodes ?? null,
    source: error.source ?? null,
    positions: error.positions ?? null,
    originalError: error.originalError ?? null,
    extensions: { ...error.extensions, http: { status: 400, spec: true } },
  });
}
