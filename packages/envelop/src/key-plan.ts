import { getArgumentValues, getDirectiveValues, type GraphQLDirective } from 'graphql';
import { AmbiguousKeyError, MissingKeyError } from '@idem/core';
import type { AdapterKit } from '@idem/core/adapter';
import type { RootField } from './root-fields.js';

/**
 * Which unit of idempotency an operation gets:
 * - `none`: no key anywhere, none required: the operation runs as it would without the plugin;
 * - `operation`: a header key and no field keys: the whole operation is one record;
 * - `field`: at least one root field has an argument or directive key: each root field is its
 *   own record under its key (the header key, if any, covers the fields that have none).
 */
export type KeyPlan =
  | { unit: 'none' }
  | { unit: 'operation'; key: string }
  | { unit: 'field'; keys: ReadonlyMap<string, string | undefined> };

export interface KeySources {
  kit: Pick<AdapterKit<unknown>, 'key' | 'fieldKey' | 'chooseKey' | 'isRequired'>;
  /** The parsed `Idempotency-Key` header, if the header is read and was sent. */
  header: string | undefined;
  /** The `@idempotent` directive definition, or undefined when directive keys are off. */
  directive: GraphQLDirective | undefined;
  variables: Record<string, unknown>;
  /** Names the schema coordinate in error details, e.g. `Mutation`. */
  rootTypeName: string;
}

/**
 * Reads every key of a mutation operation before anything executes, so that a missing (K2),
 * invalid (K3) or ambiguous (K4) key refuses the whole operation with 400 and runs nothing.
 * Throws an `IdempotencyError`; a GraphQLError from argument coercion is left to execution.
 */
export function planKeys(rootFields: readonly RootField[], sources: KeySources): KeyPlan {
  const { kit, header } = sources;
  const fieldKeys = rootFields.map((field) => fieldKey(field, sources));
  if (fieldKeys.some((key) => key !== undefined)) {
    const keys = new Map<string, string | undefined>();
    for (const [index, field] of rootFields.entries()) {
      if (!field.definition) {
        keys.set(field.responseKey, undefined);
        continue;
      }
      try {
        keys.set(field.responseKey, kit.chooseKey(field.fieldName, { header, field: fieldKeys[index] }));
      } catch (error) {
        if (error instanceof MissingKeyError) throw missingKey(field, sources);
        throw error;
      }
    }
    return { unit: 'field', keys };
  }
  if (header !== undefined) return { unit: 'operation', key: header };
  const unkeyed = rootFields.find((field) => field.definition && kit.isRequired(field.fieldName));
  if (unkeyed) throw missingKey(unkeyed, sources);
  return { unit: 'none' };
}

/** The key a root field carries in its argument or `@idempotent` directive (K4); undefined if none. */
function fieldKey(
  { definition, nodes, fieldName }: RootField,
  { kit, directive, variables, rootTypeName }: KeySources,
): string | undefined {
  if (!definition) return undefined;
  const argument = kit.key.field;
  const found = new Set<string>();
  if (argument !== false && definition.args.some((arg) => arg.name === argument)) {
    const key = kit.fieldKey(getArgumentValues(definition, nodes[0]!, variables)[argument]);
    if (key !== undefined) found.add(key);
  }
  if (directive) {
    for (const node of nodes) {
      const key = kit.fieldKey(getDirectiveValues(directive, node, variables)?.['key'], '@idempotent(key:)');
      if (key !== undefined) found.add(key);
    }
  }
  if (found.size > 1) {
    throw new AmbiguousKeyError(
      `${rootTypeName}.${fieldName} carries two different idempotency keys (argument and @idempotent directive); send one key.`,
    );
  }
  return found.values().next().value;
}

function missingKey(field: RootField, { kit, directive, rootTypeName }: KeySources): MissingKeyError {
  const argument = kit.key.field;
  const ways = [
    kit.key.header ? 'an Idempotency-Key header' : null,
    argument !== false && field.definition?.args.some((arg) => arg.name === argument)
      ? `an \`${argument}\` argument`
      : null,
    directive ? 'an @idempotent(key:) directive' : null,
  ].filter((way): way is string => way !== null);
  const send =
    ways.length === 0 ? 'a key' : ways.length === 1 ? ways[0] : `${ways.slice(0, -1).join(', ')} or ${ways.at(-1)}`;
  return new MissingKeyError(`${rootTypeName}.${field.fieldName} is idempotent and requires a key: send ${send}.`);
}
