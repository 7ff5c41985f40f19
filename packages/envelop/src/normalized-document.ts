import {
  GraphQLIncludeDirective,
  GraphQLSkipDirective,
  Kind,
  print,
  visit,
  type DefinitionNode,
  type DocumentNode,
  type FieldNode,
  type FragmentDefinitionNode,
  type OperationDefinitionNode,
  type SelectionSetNode,
} from 'graphql';
import { isIncluded } from './root-fields.js';

export function fragmentsOf(document: DocumentNode): Map<string, FragmentDefinitionNode> {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) {
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  }
  return fragments;
}

/** The fragments a selection uses, transitively, sorted by name. */
function usedFragments(
  roots: readonly SelectionSetNode[],
  fragments: ReadonlyMap<string, FragmentDefinitionNode>,
): FragmentDefinitionNode[] {
  const used = new Map<string, FragmentDefinitionNode>();
  const pending = [...roots];
  while (pending.length > 0) {
    visit(pending.pop()!, {
      FragmentSpread(node) {
        const fragment = fragments.get(node.name.value);
        if (fragment && !used.has(fragment.name.value)) {
          used.set(fragment.name.value, fragment);
          pending.push(fragment.selectionSet);
        }
      },
    });
  }
  return [...used.values()].sort((a, b) => compare(a.name.value, b.name.value));
}

/**
 * F1, operation unit: the operation as printed by graphql-js (whitespace and comments gone), its
 * variable definitions sorted by name, its name dropped (a label, not content), followed by the
 * fragments it uses sorted by name. Other operations of the document do not count.
 */
export function normalizedOperation(
  operation: OperationDefinitionNode,
  fragments: ReadonlyMap<string, FragmentDefinitionNode>,
): string {
  const variableDefinitions = [...(operation.variableDefinitions ?? [])].sort((a, b) =>
    compare(a.variable.name.value, b.variable.name.value),
  );
  const normalized: OperationDefinitionNode = { ...operation, name: undefined, variableDefinitions };
  return print({
    kind: Kind.DOCUMENT,
    definitions: [normalized, ...usedFragments([operation.selectionSet], fragments)],
  });
}

/** F1, field unit: what of a root field's selection shapes its stored value. */
export interface EffectiveSelection {
  /** The printed selection set (empty for a leaf) and the fragments it uses, `@skip`/`@include` applied. */
  selection: string;
  /** The coerced values of the variables the selection still reads: arguments of nested fields, other directives. */
  variables: Record<string, unknown>;
}

/**
 * F1, field unit: the field's effective selection. `@skip` and `@include` are applied with this
 * request's variables and dropped, so `amount @include(if: $v)` counts as `amount` or as nothing;
 * fragments count when the selection still spreads them; the variables it still reads count by
 * value. A request that selects other fields is a different request: its stored value has
 * another shape.
 */
export function effectiveSelection(
  nodes: readonly FieldNode[],
  fragments: ReadonlyMap<string, FragmentDefinitionNode>,
  variables: Record<string, unknown>,
): EffectiveSelection {
  const sets = nodes.flatMap((node) => (node.selectionSet ? [applyConditions(node.selectionSet, variables)] : []));
  const used = new Map<string, FragmentDefinitionNode>();
  const pending = [...sets];
  while (pending.length > 0) {
    visit(pending.pop()!, {
      FragmentSpread(node) {
        const fragment = fragments.get(node.name.value);
        if (!fragment || used.has(fragment.name.value)) return;
        const applied: FragmentDefinitionNode = {
          ...fragment,
          selectionSet: applyConditions(fragment.selectionSet, variables),
        };
        used.set(fragment.name.value, applied);
        pending.push(applied.selectionSet);
      },
    });
  }
  const printed = [...sets, ...[...used.values()].sort((a, b) => compare(a.name.value, b.name.value))];
  const read: Record<string, unknown> = {};
  for (const node of printed) {
    visit(node, {
      Variable(variable) {
        const name = variable.name.value;
        if (Object.hasOwn(variables, name)) read[name] = variables[name];
      },
    });
  }
  return { selection: printed.map((node) => print(node)).join('\n'), variables: read };
}

/** The selection set with `@skip`/`@include` applied: excluded selections removed, the two directives dropped from the rest. */
function applyConditions(set: SelectionSetNode, variables: Record<string, unknown>): SelectionSetNode {
  return visit(set, {
    enter(node) {
      if (node.kind !== Kind.FIELD && node.kind !== Kind.INLINE_FRAGMENT && node.kind !== Kind.FRAGMENT_SPREAD)
        return undefined;
      if (!isIncluded(node, variables)) return null;
      const directives = node.directives?.filter((directive) => !CONDITIONS.has(directive.name.value));
      return directives === undefined || directives.length === node.directives!.length
        ? undefined
        : { ...node, directives };
    },
  });
}

const CONDITIONS = new Set([GraphQLSkipDirective.name, GraphQLIncludeDirective.name]);

/**
 * A document that executes only the given root field of `operation`: same operation (name,
 * variables, directives), a selection set holding that field's nodes, and the document's
 * fragments. Nodes are reused, so error locations still point into the request's text.
 */
export function documentForField(
  document: DocumentNode,
  operation: OperationDefinitionNode,
  nodes: readonly FieldNode[],
): DocumentNode {
  const selectionSet: SelectionSetNode = { kind: Kind.SELECTION_SET, selections: nodes };
  const definitions: DefinitionNode[] = [{ ...operation, selectionSet }];
  for (const definition of document.definitions) {
    if (definition.kind === Kind.FRAGMENT_DEFINITION) definitions.push(definition);
  }
  return { kind: Kind.DOCUMENT, definitions, ...(document.loc ? { loc: document.loc } : {}) };
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
