import {
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

export function fragmentsOf(document: DocumentNode): Map<string, FragmentDefinitionNode> {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) {
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  }
  return fragments;
}

/** The fragments a selection uses, transitively, sorted by name. */
function usedFragments(roots: readonly SelectionSetNode[], fragments: ReadonlyMap<string, FragmentDefinitionNode>): FragmentDefinitionNode[] {
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
export function normalizedOperation(operation: OperationDefinitionNode, fragments: ReadonlyMap<string, FragmentDefinitionNode>): string {
  const variableDefinitions = [...(operation.variableDefinitions ?? [])].sort((a, b) => compare(a.variable.name.value, b.variable.name.value));
  const normalized: OperationDefinitionNode = { ...operation, name: undefined, variableDefinitions };
  return print({ kind: Kind.DOCUMENT, definitions: [normalized, ...usedFragments([operation.selectionSet], fragments)] });
}

/**
 * F1, field unit: the field's printed selection set (empty for a leaf) and the fragments it
 * uses. The selection set shapes the stored value, so a changed selection is a different request.
 */
export function normalizedSelection(nodes: readonly FieldNode[], fragments: ReadonlyMap<string, FragmentDefinitionNode>): string {
  const sets = nodes.flatMap((node) => (node.selectionSet ? [node.selectionSet] : []));
  return [...sets, ...usedFragments(sets, fragments)].map((node) => print(node)).join('\n');
}

/**
 * A document that executes only the given root field of `operation`: same operation (name,
 * variables, directives), a selection set holding that field's nodes, and the document's
 * fragments. Nodes are reused, so error locations still point into the request's text.
 */
export function documentForField(document: DocumentNode, operation: OperationDefinitionNode, nodes: readonly FieldNode[]): DocumentNode {
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
