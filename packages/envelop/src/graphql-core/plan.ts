/**
 * The key plan of a mutation operation (SPEC K2, K4, E4, F1): its units, each with its key and
 * fingerprint input, decided before anything executes from graphql-js's own readings — the
 * variables as `getVariableValues` coerces them, the root fields as execution's `collectFields`
 * collects them (aliases, fragments, `@include`/`@skip`), each key as `getArgumentValues` /
 * `getDirectiveValues` coerce it. A plan is complete, or it is an answer that executes nothing.
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
// graphql 16 exports execution's field collection from this path only (`@internal`): the one
// import of it, pinned by test/plan.test.ts. Node resolves `graphql` to the same CJS build.
import { collectFields } from 'graphql/execution/collectFields.js';
import { AmbiguousKeyError, isIdempotencyError, MissingKeyError, type IdempotencyError } from '@idem/core';
import type { AdapterKit } from '@idem/core/adapter';
import { fieldSelection, normalizedOperation } from './normalized-document.js';
import type { FingerprintInput } from './options.js';

/** One entry of the root selection set, as graphql-js executes it. `definition` is undefined for `__typename`. */
export interface RootField {
  responseKey: string;
  fieldName: string;
  nodes: readonly FieldNode[];
  definition: GraphQLField<unknown, unknown> | undefined;
}

/** What runs under one claim: the operation (a header key), or one root field (the field unit). */
export interface PlannedUnit {
  /** The operation part of its scope (S1): `mutation:<root fields, sorted>` or `Mutation.<field>`. */
  operation: string;
  key: string;
  input: FingerprintInput;
  /** The schema coordinates it covers (its policy). */
  coordinates: string[];
  /** How many root fields, its parts (E4). */
  parts: number;
  /** The root field, in the field unit. */
  field?: RootField;
}

export type KeyPlan =
  | { unit: 'none' }
  | { unit: 'operation'; run: PlannedUnit }
  /** `run` is undefined for `__typename`. */
  | { unit: 'field'; fields: Array<{ field: RootField; run?: PlannedUnit }> }
  /** K2/K4: 400, nothing executed. */
  | { unit: 'refused'; error: IdempotencyError }
  /** graphql-js's answer to a request it executes nothing of. */
  | { unit: 'unexecutable'; result: { errors: readonly GraphQLError[]; data?: null } };

export interface KeySources {
  kit: Pick<AdapterKit<unknown>, 'key' | 'fieldKey' | 'chooseKey' | 'isRequired' | 'unkeyed'>;
  /** The parsed `Idempotency-Key` header, if it is read and was sent. */
  header: string | undefined;
  /** The `@idempotent` directive, when directive keys are on and the schema declares it. */
  directive: GraphQLDirective | undefined;
}

interface Planning extends KeySources {
  rootTypeName: string;
  fragments: Record<string, FragmentDefinitionNode>;
  variables: Record<string, unknown>;
}

/**
 * Plans `operation`, a mutation of `rootType`. A key that does not coerce cannot be known, nor
 * the fingerprint of a field with its own key whose other arguments do not coerce: the request
 * is then answered with graphql-js's error as a request error, and nothing runs.
 */
export function planOperation(
  args: ExecutionArgs,
  operation: OperationDefinitionNode,
  rootType: GraphQLObjectType,
  sources: KeySources,
): KeyPlan {
  const fragments: Record<string, FragmentDefinitionNode> = Object.create(null);
  for (const definition of args.document.definitions)
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments[definition.name.value] = definition;
  const coerced = getVariableValues(args.schema, operation.variableDefinitions ?? [], args.variableValues ?? {}, {
    maxErrors: args.options?.maxCoercionErrors ?? 50,
    hideSuggestions: args.hideSuggestions ?? false,
  });
  if (coerced.errors) return { unit: 'unexecutable', result: { errors: coerced.errors } };
  const planning: Planning = { ...sources, rootTypeName: rootType.name, fragments, variables: coerced.coerced };
  let collected;
  try {
    collected = collectFields(args.schema, fragments, planning.variables, rootType, operation.selectionSet);
  } catch (error) {
    // graphql-js fails the whole operation there, before any field.
    if (error instanceof GraphQLError) return { unit: 'unexecutable', result: { errors: [error], data: null } };
    throw error;
  }
  const definitions = rootType.getFields();
  const rootFields = [...collected].map(([responseKey, nodes]) => {
    const fieldName = nodes[0]!.name.value;
    return { responseKey, fieldName, nodes, definition: definitions[fieldName] };
  });
  try {
    return planKeys(operation, rootFields, planning);
  } catch (error) {
    if (error instanceof GraphQLError) return { unit: 'unexecutable', result: { errors: [asRequestError(error)] } };
    if (isIdempotencyError(error)) return { unit: 'refused', error };
    throw error;
  }
}

function planKeys(operation: OperationDefinitionNode, rootFields: RootField[], planning: Planning): KeyPlan {
  const { kit, header, rootTypeName, fragments, variables } = planning;
  const ownKeys = rootFields.map((field) => ownKey(field, planning));
  if (ownKeys.every((key) => key === undefined)) {
    const names = [...new Set(rootFields.filter((field) => field.definition).map((field) => field.fieldName))];
    names.sort();
    if (header === undefined) {
      // K2, reported under the operation a header key would have made it.
      const unkeyed = rootFields.find((field) => field.definition && kit.isRequired(field.fieldName));
      if (names.length > 0) kit.unkeyed(`mutation:${names.join(',')}`, unkeyed !== undefined);
      if (unkeyed) throw missingKey(unkeyed, planning);
      return { unit: 'none' };
    }
    const input: FingerprintInput = {
      unit: 'operation',
      document: normalizedOperation(operation, fragments),
      variables,
    };
    const coordinates = names.map((name) => `${rootTypeName}.${name}`);
    return {
      unit: 'operation',
      run: { operation: `mutation:${names.join(',')}`, key: header, input, coordinates, parts: rootFields.length },
    };
  }
  // The field unit: every root field its own record, under its own key or the header's.
  const records = new Set<string>();
  const fields = rootFields.map((field, index) => {
    if (!field.definition) return { field };
    const own = ownKeys[index];
    if (own === undefined && header === undefined) {
      kit.unkeyed(`${rootTypeName}.${field.fieldName}`, true);
      throw missingKey(field, planning);
    }
    const key = kit.chooseKey(field.fieldName, { header, field: own })!;
    // E4: one key identifies one unit — two root fields never share a stored outcome.
    const record = JSON.stringify([field.fieldName, key]);
    if (records.has(record))
      throw new AmbiguousKeyError(
        `Two root fields of this operation would be one record (${rootTypeName}.${field.fieldName} under one key), so one key would answer for both; give each its own key.`,
      );
    records.add(record);
    // F1: its arguments as graphql-js coerces them for the resolver, without the key argument.
    const values = getArgumentValues(field.definition, field.nodes[0]!, variables);
    if (kit.key.field !== false) delete values[kit.key.field];
    const coordinate = `${rootTypeName}.${field.fieldName}`;
    const input: FingerprintInput = {
      unit: 'field',
      field: field.fieldName,
      arguments: values,
      ...fieldSelection(field.nodes, fragments, variables),
    };
    return { field, run: { operation: coordinate, key, input, coordinates: [coordinate], parts: 1, field } };
  });
  return { unit: 'field', fields };
}

/** The key a root field carries in its key argument or `@idempotent(key:)` (K4), coerced by graphql-js. */
function ownKey({ definition, nodes, fieldName }: RootField, { kit, directive, variables, rootTypeName }: Planning) {
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

/** K2: a required field without a key, or a field of the field unit without one (every one then needs a key). */
function missingKey(field: RootField, { kit, directive, rootTypeName }: Planning): MissingKeyError {
  const ways = [
    kit.key.header ? 'an Idempotency-Key header' : null,
    field.definition?.args.some((arg) => arg.name === kit.key.field) ? `an \`${kit.key.field}\` argument` : null,
    directive ? 'an @idempotent(key:) directive' : null,
  ].filter((way): way is string => way !== null);
  const send = ways.length < 2 ? (ways[0] ?? 'a key') : `${ways.slice(0, -1).join(', ')} or ${ways.at(-1)}`;
  const what = kit.isRequired(field.fieldName)
    ? 'is idempotent and requires a key'
    : 'has no key, while other root fields of this operation carry their own';
  return new MissingKeyError(`${rootTypeName}.${field.fieldName} ${what}: send ${send}.`);
}

/**
 * A request error (GraphQL over HTTP): no `data`; Yoga answers 400 for
 * `application/graphql-response+json`, 200 for `application/json` (its `spec` flag, as for its
 * own validation errors). The error is graphql-js's, thrown for this request alone.
 */
function asRequestError(error: GraphQLError): GraphQLError {
  Object.assign(error.extensions, { http: { status: 400, spec: true } });
  return error;
}
