/** F1 for GraphQL: what of a document the fingerprint reads, and the document of one root field. */
import {
  Kind,
  print,
  visit,
  type ASTNode,
  type DocumentNode,
  type FieldNode,
  type FragmentDefinitionNode,
  type OperationDefinitionNode,
} from 'graphql';

type Fragments = Readonly<Record<string, FragmentDefinitionNode>>;

/**
 * F1, operation unit: the operation as printed by graphql-js (whitespace and comments gone), its
 * variable definitions sorted by name, its name dropped (a label, not content), followed by the
 * fragments it uses sorted by name. Other operations of the document do not count.
 */
export function normalizedOperation(operation: OperationDefinitionNode, fragments: Fragments): string {
  const variableDefinitions = [...(operation.variableDefinitions ?? [])].sort((a, b) =>
    compare(a.variable.name.value, b.variable.name.value),
  );
  const normalized: OperationDefinitionNode = { ...operation, name: undefined, variableDefinitions };
  return print({
    kind: Kind.DOCUMENT,
    definitions: [normalized, ...usedFragments([operation.selectionSet], fragments)],
  });
}

/**
 * F1, field unit: a root field's selection as written — its selection sets and the fragments
 * they use, printed — and the coerced values of the variables it reads (nested arguments,
 * `@include`/`@skip`). Nothing is evaluated, so nothing here can fail where graphql-js would not.
 */
export function fieldSelection(
  nodes: readonly FieldNode[],
  fragments: Fragments,
  variables: Record<string, unknown>,
): { selection: string; variables: Record<string, unknown> } {
  const sets = nodes.flatMap((node) => (node.selectionSet ? [node.selectionSet] : []));
  const printed = [...sets, ...usedFragments(sets, fragments)];
  const read: Record<string, unknown> = {};
  for (const node of printed)
    visit(node, {
      Variable({ name: { value } }) {
        if (Object.hasOwn(variables, value)) read[value] = variables[value];
      },
    });
  return { selection: printed.map((node) => print(node)).join('\n'), variables: read };
}

/** The fragments `roots` spread, transitively, sorted by name. */
function usedFragments(roots: readonly ASTNode[], fragments: Fragments): FragmentDefinitionNode[] {
  const used = new Map<string, FragmentDefinitionNode>();
  const pending = [...roots];
  while (pending.length > 0)
    visit(pending.pop()!, {
      FragmentSpread({ name: { value } }) {
        const fragment = fragments[value];
        if (fragment && !used.has(value)) pending.push(used.set(value, fragment).get(value)!);
      },
    });
  return [...used.values()].sort((a, b) => compare(a.name.value, b.name.value));
}

/**
 * A document that executes only one root field of `operation`: the same operation (name,
 * variables, directives) with a selection set of that field's nodes, and the document's
 * fragments. Nodes are reused, so error locations still point into the request's text.
 */
export function documentForField(
  document: DocumentNode,
  operation: OperationDefinitionNode,
  nodes: readonly FieldNode[],
): DocumentNode {
  const fragments = document.definitions.filter((definition) => definition.kind === Kind.FRAGMENT_DEFINITION);
  const selected: OperationDefinitionNode = {
    ...operation,
    selectionSet: { kind: Kind.SELECTION_SET, selections: nodes },
  };
  return { ...document, definitions: [selected, ...fragments] };
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
