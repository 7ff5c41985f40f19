import {
  getDirectiveValues,
  GraphQLIncludeDirective,
  GraphQLSkipDirective,
  isAbstractType,
  Kind,
  typeFromAST,
  type FieldNode,
  type FragmentDefinitionNode,
  type FragmentSpreadNode,
  type GraphQLField,
  type GraphQLObjectType,
  type GraphQLSchema,
  type InlineFragmentNode,
  type NamedTypeNode,
  type SelectionSetNode,
} from 'graphql';

/** One entry of a mutation's root selection set, as graphql-js would execute it. */
export interface RootField {
  /** The alias, or the field name. */
  responseKey: string;
  fieldName: string;
  /** Every node merged under this response key (same field, same arguments: validation says so). */
  nodes: readonly FieldNode[];
  /** Undefined for `__typename`. */
  definition: GraphQLField<unknown, unknown> | undefined;
}

/**
 * The root fields of an operation in execution order, with fragments expanded and `@skip` /
 * `@include` applied — what graphql-js's internal `collectFields` does, rebuilt on the public API
 * so that it holds across graphql 16 minor versions.
 */
export function collectRootFields(
  schema: GraphQLSchema,
  rootType: GraphQLObjectType,
  selectionSet: SelectionSetNode,
  fragments: ReadonlyMap<string, FragmentDefinitionNode>,
  variables: Record<string, unknown>,
): RootField[] {
  const fields = new Map<string, FieldNode[]>();
  const visitedFragments = new Set<string>();
  const definitions = rootType.getFields();

  const applies = (condition: NamedTypeNode | undefined) => {
    if (!condition) return true;
    const type = typeFromAST(schema, condition);
    if (type === rootType) return true;
    return type !== undefined && isAbstractType(type) && schema.isSubType(type, rootType);
  };
  const walk = (set: SelectionSetNode) => {
    for (const selection of set.selections) {
      if (!isIncluded(selection, variables)) continue;
      if (selection.kind === Kind.FIELD) {
        const responseKey = selection.alias?.value ?? selection.name.value;
        const nodes = fields.get(responseKey);
        if (nodes) nodes.push(selection);
        else fields.set(responseKey, [selection]);
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        if (applies(selection.typeCondition)) walk(selection.selectionSet);
      } else {
        const name = selection.name.value;
        if (visitedFragments.has(name)) continue;
        visitedFragments.add(name);
        const fragment = fragments.get(name);
        if (fragment && applies(fragment.typeCondition)) walk(fragment.selectionSet);
      }
    }
  };
  walk(selectionSet);

  return [...fields].map(([responseKey, nodes]) => {
    const fieldName = nodes[0]!.name.value;
    return { responseKey, fieldName, nodes, definition: definitions[fieldName] };
  });
}

/** Whether `@skip` / `@include` with these variables keep a selection (GraphQL spec, CollectFields). */
export function isIncluded(
  node: FieldNode | InlineFragmentNode | FragmentSpreadNode,
  variables: Record<string, unknown>,
): boolean {
  const skip = getDirectiveValues(GraphQLSkipDirective, node, variables);
  if (skip?.['if'] === true) return false;
  const include = getDirectiveValues(GraphQLIncludeDirective, node, variables);
  return include?.['if'] !== false;
}
