import { GraphQLError } from 'graphql';
import { createSchema, createYoga, maskError, type Plugin, type YogaServerOptions } from 'graphql-yoga';
import { maxDepthPlugin } from '@escape.tech/graphql-armor-max-depth';
import { maxTokensPlugin } from '@escape.tech/graphql-armor-max-tokens';
import { notStarted, type ClaimContext } from '@idem/core';
import {
  useYogaIdempotency,
  idempotentDirectiveTypeDefs,
  idempotencyKeyStatusResolver,
  idempotencyKeyStatusTypeDefs,
} from '@idem/envelop';
import { accountOf, SHARED_ACCOUNTS } from './account.ts';
import {
  ChargeNotRecordedError,
  ChargeRefusedError,
  innermostMessage,
  PaymentChannelError,
  PaymentChannelTimeoutError,
  PaymentDeclinedError,
} from './channel.ts';
import type { DrizzleDatabase, DrizzleTransaction } from '@idem/drizzle';
import { DEFAULT_MAX_BODY_BYTES, SEMANTICS } from './config.ts';
import { paymentInput, UNEXPECTED_ERROR_MESSAGE, type PaymentsRouterOptions } from './trpc.ts';

/** The payments schema, served by GraphQL Yoga at `/graphql` and by Apollo Server at `/apollo/graphql`. */
export const paymentsTypeDefs = /* GraphQL */ `
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

  "What the ledger holds for one of the caller's idempotency keys (every operation together)."
  type KeyLedger {
    account: String!
    key: String!
    reservations: Int!
    "How many times the reservation was asked for: 1 when a resume skipped the completed reserve step."
    reserveRuns: Int!
    charges: Int!
    "Charge attempts that timed out (amount 14)."
    timeouts: Int!
  }

  type Query {
    "Every charge the payment channel saw, oldest first."
    ledger: [LedgerEntry!]!
    "What the ledger holds for one of the caller's idempotency keys, as GET /v1/ledger?key=…"
    keyLedger(key: String!): KeyLedger!
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
  cors?: YogaServerOptions<object, object>['cors'];
}

/** The context both hosts build: the request's headers (Yoga's Fetch `Request`; a `Headers` from Node's on Apollo Server). */
export interface GraphQLContext {
  request: { headers: { get(name: string): string | null } };
}

/** The options of the idempotency plugin, the same on both hosts (one store, one principal, one policy). */
export function paymentsIdempotencyOptions({
  store,
  retentionMs,
  leaseMs,
  waitMs = 0,
  onEvent,
  atomic = false,
  semantics = 'v1',
}: PaymentsRouterOptions) {
  return {
    store,
    principal: (context: GraphQLContext) => accountOf(context.request.headers.get('authorization')),
    required: ['createPayment'],
    retention: retentionMs,
    lease: leaseMs,
    wait: waitMs,
    atomic,
    onFailure: SEMANTICS[semantics],
    ...(onEvent ? { onEvent } : {}),
  };
}

/** The resolvers of {@link paymentsTypeDefs}; `claim` is the plugin's `claim(context)`. */
export function paymentsResolvers(
  options: PaymentsRouterOptions,
  claimOf: (context: GraphQLContext) => ClaimContext<DrizzleTransaction<DrizzleDatabase>> | undefined,
) {
  const { channel, semantics = 'v1' } = options;
  return {
    Query: {
      ledger: () => channel.ledger(),
      keyLedger: (_: unknown, { key }: { key: string }, context: GraphQLContext) =>
        channel.keyLedger(accountOf(context.request.headers.get('authorization')), key),
      // What became of one of the caller's keys (reconcile, R2): the same store and principal as the plugin.
      idempotencyKeyStatus: idempotencyKeyStatusResolver({
        ...paymentsIdempotencyOptions(options),
        sharedPrincipals: SHARED_ACCOUNTS,
      }),
    },
    Mutation: {
      createPayment: async (
        _: unknown,
        args: { input: { amount: number; currency: string } },
        context: GraphQLContext,
      ) => {
        const parsed = paymentInput.safeParse(args.input);
        // Refused before the channel is called: the claim is released, nothing stored (E4).
        if (!parsed.success)
          throw notStarted(
            context,
            new GraphQLError(
              parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; '),
              { extensions: { code: 'BAD_USER_INPUT' } },
            ),
          );
        const input = parsed.data;
        // The claim, with the store's transaction typed (atomic mode): `idempotencyClaim(context)` for the plugin's store.
        const claim = claimOf(context);
        try {
          return await channel.pay(
            {
              account: accountOf(context.request.headers.get('authorization')),
              amount: input.amount,
              currency: input.currency,
            },
            claim,
            { steps: semantics === 'v2' },
          );
        } catch (error) {
          // The channel timed out, nothing charged: 504, replayed (v1) or resumed by the retry (v2).
          if (error instanceof PaymentChannelTimeoutError)
            throw new GraphQLError(error.message, {
              extensions: { code: 'PAYMENT_CHANNEL_TIMEOUT', http: { status: 504 } },
            });
          // Declined: the client's to fix, a final failure stored and replayed in both modes.
          if (error instanceof PaymentDeclinedError)
            throw new GraphQLError(error.message, { extensions: { code: 'PAYMENT_DECLINED', http: { status: 402 } } });
          // Nothing was charged: give the key back (E4), so that the retry the 503 asks for charges.
          if (error instanceof ChargeNotRecordedError)
            throw notStarted(
              context,
              new GraphQLError(error.message, {
                extensions: { code: 'SERVICE_UNAVAILABLE', http: { status: 503, headers: { 'Retry-After': '1' } } },
              }),
            );
          // The database refused the payment's data: the client's to fix, nothing charged (E4).
          if (error instanceof ChargeRefusedError)
            throw notStarted(
              context,
              new GraphQLError(error.message, { extensions: { code: 'BAD_USER_INPUT', http: { status: 400 } } }),
            );
          // The channel's failure after it charged is meant for the client (stored and replayed, E4).
          if (error instanceof PaymentChannelError)
            throw new GraphQLError(error.message, { extensions: { code: 'PAYMENT_CHANNEL_FAILED' } });
          throw error;
        }
      },
    },
  };
}

/** GraphQL Yoga at `/graphql`: `createPayment` (idempotent) and `ledger`. */
export function createPaymentsYoga({
  maxBodyBytes = DEFAULT_MAX_BODY_BYTES,
  cors = false,
  ...shared
}: PaymentsGraphQLOptions) {
  const options = paymentsIdempotencyOptions(shared);
  const idempotency = useYogaIdempotency(options);
  const schema = createSchema<GraphQLContext>({
    typeDefs: paymentsTypeDefs,
    resolvers: paymentsResolvers(shared, (context) => idempotency.claim(context)),
  });
  const yoga = createYoga<{ request: Request }>({
    graphqlEndpoint: '/graphql',
    maxRequestBodySize: maxBodyBytes,
    cors,
    logging: false,
    // An unexpected error (a database error carrying its SQL and parameters, a bug) reaches the
    // client as a generic message, first answer and replays alike (@idem/envelop stores it marked
    // unexpected); its cause goes to the server's log. GraphQLErrors, the channel's own failure
    // among them, are answered as they are.
    maskedErrors: {
      errorMessage: UNEXPECTED_ERROR_MESSAGE,
      maskError(error, message, isDev) {
        const masked = maskError(error, message, isDev);
        if (masked !== error) {
          const cause = error instanceof GraphQLError ? (error.originalError ?? error) : error;
          console.error(`[payments] GraphQL operation failed unexpectedly: ${innermostMessage(cause)}`);
        }
        return masked;
      },
    },
    schema,
    plugins: [
      useBodyLimitStatus(maxBodyBytes),
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
  // R4: the idempotent mutations as the plugin publishes them (their onFailure among the rest).
  return { yoga, engine: idempotency.engine, describeEndpoints: () => idempotency.describeEndpoints(schema) };
}

/**
 * 413 for a multipart body over the limit that came without `Content-Length` (chunked): Yoga
 * counts its bytes as they stream in and fails the stream with its 413 error, but its multipart
 * parser reports any stream failure as "invalid multipart data", a 400. Here the body is read
 * through a stream that notes why it failed (and counts, whichever wrapper reads first), and
 * that failure is answered with Yoga's own 413.
 */
function useBodyLimitStatus(limit: number): Plugin {
  return {
    onRequestParse({ request, requestParser, setRequestParser }) {
      if (!requestParser || !/^multipart\/form-data/i.test(request.headers.get('content-type') ?? '')) return;
      setRequestParser(async (incoming) => {
        if (!incoming.body) return requestParser(incoming);
        const reader = incoming.body.getReader();
        let bytes = 0;
        let failure: unknown;
        const body = new ReadableStream<Uint8Array>({
          async pull(controller) {
            try {
              const { done, value } = await reader.read();
              if (done) return controller.close();
              bytes += value.byteLength;
              controller.enqueue(value);
            } catch (error) {
              failure = error;
              controller.error(error);
            }
          },
          cancel: (reason) => reader.cancel(reason),
        });
        try {
          return await requestParser(
            new Request(incoming.url, {
              method: incoming.method,
              headers: incoming.headers,
              body,
              duplex: 'half',
            } as RequestInit),
          );
        } catch (error) {
          if (statusOf(failure) === 413) throw failure;
          if (bytes > limit)
            throw new GraphQLError('Request body too large', {
              extensions: { code: 'REQUEST_ENTITY_TOO_LARGE', http: { status: 413 } },
            });
          throw error;
        }
      });
    },
  };
}

function statusOf(error: unknown): unknown {
  return error instanceof GraphQLError
    ? (error.extensions['http'] as { status?: unknown } | undefined)?.status
    : undefined;
}
