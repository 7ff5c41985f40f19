import { GraphQLError, type ASTVisitor, type ValidationContext } from 'graphql';
import { IDEMPOTENT_DIRECTIVE_NAME } from './directive.js';

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
