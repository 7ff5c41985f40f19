import { GraphQLError } from 'graphql';
import { createSchema, createYoga, type CORSOptions } from 'graphql-yoga';
import { maxDepthPlugin } from '@escape.tech/graphql-armor-max-depth';
import { maxTokensPlugin } from '@escape.tech/graphql-armor-max-tokens';
import { HandlerNotStartedError } from '@idem/core';
import {
  useYogaIdempotency,
  idempotentDirectiveTypeDefs,
  idempotencyKeyStatusResolver,
  idempotencyKeyStatusTypeDefs,
} from '@idem/envelop';
import { accountOf } from './account.ts';
import { DEFAULT_MAX_BODY_BYTES } from './config.ts';
import { paymentInput, type PaymentsRouterOptions } from './trpc.ts';

const typeDefs = /* GraphQL */ `
  ${idempotentDirectiveTypeDefs}
  ${idempotencyKeyStatusTypeDefs}

  input PaymentInput {
    "A positive integer, in minor units."
    amount: Int!
    "Three uppercase letters, e.g. EUR."
    currency: String!
  }

  type Payment {
    id: ID!
    amount: Int!
    currency: String!
    createdAt: String!
  }

  type LedgerEntry {
    id: ID!
    amount: Int!
    currency: String!
  }

  type Query {
    "Every charge the payment channel saw, oldest first."
    ledger: [LedgerEntry!]!
  }

  type Mutation {
    "Charges through the channel. Idempotent: key from the Idempotency-Key header, the idempotencyKey argument, or @idempotent(key:)."
    createPayment(input: PaymentInput!, idempotencyKey: String): Payment!
  }
`;

/**
 * Bounds on a document, checked before it runs (graphql-armor): graphql-js's parser recurses
 * once per nesting level, so an unbounded document a few thousand levels deep overflows its
 * stack (a 500). The token limit stops the parser first, and so bounds its depth; the depth
 * limit then refuses selections deeper than this schema needs (introspection excepted). Both
 * answer 400.
 */
export const GRAPHQL_LIMITS = { maxTokens: 1000, maxDepth: 6 };

/** The same configuration as the tRPC router's (one store, one channel, one policy), and the body limit. */
export interface PaymentsGraphQLOptions extends PaymentsRouterOptions {
  /** The largest request body accepted, in bytes: Yoga answers 413 past it. Defaults to 64 KiB. */
  maxBodyBytes?: number;
  /** Yoga's `cors`: `idempotencyCors({ origin })` from @idem/core, or `false` for none. Defaults to `false` (Yoga's own default allows every origin). */
  cors?: CORSOptions;
}

interface GraphQLContext {
  request: Request;
}

/** GraphQL Yoga at `/graphql`: `createPayment` (idempotent) and `ledger`. */
export function createPaymentsYoga({
  store,
  channel,
  retentionMs,
  leaseMs,
  onEvent,
  atomic = false,
  maxBodyBytes = DEFAULT_MAX_BODY_BYTES,
  cors = false,
}: PaymentsGraphQLOptions) {
  const options = {
    store,
    principal: (context: GraphQLContext) => accountOf(context.request.headers.get('authorization')),
    required: ['createPayment'],
    retention: retentionMs,
    lease: leaseMs,
    atomic,
    ...(onEvent ? { onEvent } : {}),
  };
  const idempotency = useYogaIdempotency(options);
  const yoga = createYoga<GraphQLContext>({
    graphqlEndpoint: '/graphql',
    maxRequestBodySize: maxBodyBytes,
    cors,
    logging: false,
    maskedErrors: false,
    schema: createSchema<GraphQLContext>({
      typeDefs,
      resolvers: {
        Query: {
          ledger: () => channel.ledger(),
          // What became of one of the caller's keys (reconcile, R2): the same store and principal as the plugin.
          idempotencyKeyStatus: idempotencyKeyStatusResolver(options),
        },
        Mutation: {
          createPayment: async (_, args: { input: { amount: number; currency: string } }, context) => {
            const parsed = paymentInput.safeParse(args.input);
            // Refused before the channel is called: the claim is released, nothing stored (E4).
            if (!parsed.success)
              throw new HandlerNotStartedError(
                new GraphQLError(
                  parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; '),
                  { extensions: { code: 'BAD_USER_INPUT' } },
                ),
              );
            const input = parsed.data;
            // The claim, with the store's transaction typed (atomic mode): `idempotencyClaim(context)` for the plugin's store.
            const claim = idempotency.claim(context);
            return channel.charge(
              {
                account: accountOf(context.request.headers.get('authorization')),
                amount: input.amount,
                currency: input.currency,
                downstreamKey: claim?.deriveKey('channel'),
              },
              claim?.tx,
            );
          },
        },
      },
    }),
    plugins: [
      maxTokensPlugin({ n: GRAPHQL_LIMITS.maxTokens }),
      // Reported as a validation error (400); thrown from a validation rule, Yoga would answer 200.
      maxDepthPlugin({
        n: GRAPHQL_LIMITS.maxDepth,
        propagateOnRejection: false,
        onReject: [(context, error) => context?.reportError(error)],
      }),
      idempotency,
    ],
  });
  return { yoga, engine: idempotency.engine };
}
