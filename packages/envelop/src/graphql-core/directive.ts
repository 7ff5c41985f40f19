import {
  DirectiveLocation,
  GraphQLDirective,
  GraphQLError,
  GraphQLNonNull,
  GraphQLString,
  type ASTVisitor,
  type ValidationContext,
} from 'graphql';

/** The directive's name in documents: `@idempotent(key: "...")`. */
export const IDEMPOTENT_DIRECTIVE_NAME = 'idempotent';

const DESCRIPTION =
  'Makes this root mutation field idempotent under `key`: a retry with the same key and arguments replays the stored result instead of running the mutation again.';

/**
 * SDL of the executable directive that carries a per-field key (K4), Shopify style:
 * `mutation { createOrder(input: $input) @idempotent(key: "8e03978e") { id } }`.
 * Add it to your type definitions (`createSchema({ typeDefs: [idempotentDirectiveTypeDefs, ...] })`).
 */
export const idempotentDirectiveTypeDefs = /* GraphQL */ `
"""
Makes this root mutation field idempotent under \`key\`: a retry with the same key and arguments
replays the stored result instead of running the mutation again.
"""
directive @idempotent(key: String!) on FIELD
`;

/** The same directive for code-first schemas: `new GraphQLSchema({ directives: [...specifiedDirectives, idempotentDirective] })`. */
export const idempotentDirective = new GraphQLDirective({
  name: IDEMPOTENT_DIRECTIVE_NAME,
  description: DESCRIPTION,
  locations: [DirectiveLocation.FIELD],
  args: { key: { type: new GraphQLNonNull(GraphQLString) } },
});

/**
 * Validation rule: `@idempotent` belongs on root mutation fields. Anywhere else it would be
 * ignored and the client would believe a field is idempotent when it is not.
 */
export function IdempotentDirectivePlacementRule(context: ValidationContext): ASTVisitor {
  return {
    Field(node) {
      const directive = node.directives?.find((d) => d.name.value === IDEMPOTENT_DIRECTIVE_NAME);
      if (!directive) return;
      const mutationType = context.getSchema().getMutationType();
      if (mutationType && context.getParentType() === mutationType) return;
      context.reportError(
        new GraphQLError('The @idempotent directive only applies to root mutation fields.', { nodes: directive }),
      );
    },
  };
}
