import { DirectiveLocation, GraphQLDirective, GraphQLNonNull, GraphQLString } from 'graphql';

/** The directive's name in documents: `@idempotent(key: "...")`. */
export const IDEMPOTENT_DIRECTIVE_NAME = 'idempotent';

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
  description:
    'Makes this root mutation field idempotent under `key`: a retry with the same key and arguments replays the stored result instead of running the mutation again.',
  locations: [DirectiveLocation.FIELD],
  args: { key: { type: new GraphQLNonNull(GraphQLString) } },
});
