import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApolloServer } from '@apollo/server';
import { unwrapResolverError } from '@apollo/server/errors';
import { expressMiddleware } from '@as-integrations/express5';
import express from 'express';
import { GraphQLError, type GraphQLFormattedError } from 'graphql';
import { createSchema } from 'graphql-yoga';
import { useApolloIdempotency } from '@idem/apollo-server';
import { innermostMessage } from './channel.ts';
import { DEFAULT_MAX_BODY_BYTES } from './config.ts';
import {
  GRAPHQL_LIMITS,
  paymentsIdempotencyOptions,
  paymentsResolvers,
  paymentsTypeDefs,
  type GraphQLContext,
} from './graphql.ts';
import { UNEXPECTED_ERROR_MESSAGE, type PaymentsRouterOptions } from './trpc.ts';

/** Where Apollo Server answers, beside Yoga's `/graphql`. */
export const APOLLO_GRAPHQL_PATH = '/apollo/graphql';

export interface PaymentsApolloOptions extends PaymentsRouterOptions {
  /** The largest JSON body accepted, in bytes: express answers 413 past it. Defaults to 64 KiB. */
  maxBodyBytes?: number;
}

/**
 * Apollo Server 5 at `/apollo/graphql` (through `@as-integrations/express5`), on the same schema,
 * store, channel and `Authorization` accounts as Yoga's `/graphql`, made idempotent by
 * `@idem/apollo-server`. Returns a Node request listener.
 */
export function createPaymentsApollo({ maxBodyBytes = DEFAULT_MAX_BODY_BYTES, ...shared }: PaymentsApolloOptions) {
  // The same masking as Yoga's `maskedErrors`: given to Apollo and to the plugin, which formats
  // the idempotent mutations' answers itself (first answers and replays).
  const formatError = (formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError => {
    const cause = unwrapResolverError(error);
    if (cause instanceof GraphQLError || formatted.extensions?.['code'] !== 'INTERNAL_SERVER_ERROR') return formatted;
    console.error(`[payments] GraphQL operation failed unexpectedly: ${innermostMessage(cause)}`);
    return { message: UNEXPECTED_ERROR_MESSAGE, ...(formatted.path ? { path: formatted.path } : {}) };
  };
  const idempotency = useApolloIdempotency({ ...paymentsIdempotencyOptions(shared), formatError });
  const apollo = new ApolloServer<GraphQLContext>({
    schema: createSchema<GraphQLContext>({
      typeDefs: paymentsTypeDefs,
      resolvers: paymentsResolvers(shared, (context) => idempotency.claim(context)),
    }),
    plugins: [idempotency],
    formatError,
    parseOptions: { maxTokens: GRAPHQL_LIMITS.maxTokens },
    // The example's server owns its lifetime (SIGTERM drains the engines in main.ts).
    stopOnTerminationSignals: false,
  });
  apollo.startInBackgroundHandlingStartupErrorsByLoggingAndFailingAllRequests();
  const app = express();
  app.disable('x-powered-by');
  app.use(
    APOLLO_GRAPHQL_PATH,
    express.json({ limit: maxBodyBytes }),
    expressMiddleware(apollo, {
      context: async ({ req }) => ({ request: { headers: toHeaders(req.headers) } }),
    }),
  );
  return {
    listener: (req: IncomingMessage, res: ServerResponse) => app(req, res),
    engine: idempotency.engine,
    stop: () => apollo.stop(),
  };
}

function toHeaders(headers: IncomingMessage['headers']): Headers {
  const result = new Headers();
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    for (const one of Array.isArray(value) ? value : [value]) result.append(name, one);
  }
  return result;
}
