import { createPolicyDocument, type PolicyDocument } from '@idem/core';

/** The `onFailure` each endpoint's adapter publishes (`describeEndpoint(…)`): `IDEM_SEMANTICS` chose it. */
export interface EndpointModes {
  trpc: 'replay' | 'resume';
  graphql: 'replay' | 'resume';
  http: 'replay' | 'resume';
}

/**
 * The published retention policy of this server (draft §2.3, SPEC R4), generated from the
 * configuration the three endpoints run with: `onFailure` is each adapter's own description of its
 * endpoint (`IDEM_SEMANTICS` chose it: v1 `replay`, v2 `resume`).
 */
export function paymentsPolicy({
  retentionMs,
  leaseMs,
  waitMs = 0,
  onFailure = { trpc: 'replay', graphql: 'replay', http: 'replay' },
  documentationUrl,
}: {
  retentionMs: number;
  leaseMs: number;
  waitMs?: number;
  onFailure?: EndpointModes;
  documentationUrl: string;
}): PolicyDocument {
  const common = { required: true, retentionMs, leaseMs, waitMs, expiredReuse: 'execute' as const };
  return createPolicyDocument({
    title: 'Idempotency policy — payments example',
    documentationUrl,
    endpoints: [
      {
        ...common,
        endpoint: 'tRPC mutation payments.create (POST /trpc/payments.create)',
        transport: 'trpc',
        onFailure: onFailure.trpc,
        operation: 'payments.create',
        keySources: ['Idempotency-Key header', 'input field idempotencyKey'],
        stored:
          'the output { id, amount, currency, createdAt }, or the error (tRPC code, message, HTTP status), INTERNAL_SERVER_ERROR included',
        fingerprint: 'SHA-256 of the validated input { amount, currency }; the idempotencyKey field is left out',
      },
      {
        ...common,
        endpoint:
          'GraphQL Mutation.createPayment (POST /graphql on GraphQL Yoga, POST /apollo/graphql on Apollo Server: one record for both)',
        transport: 'graphql',
        onFailure: onFailure.graphql,
        operation: 'Mutation.createPayment',
        keySources: [
          'Idempotency-Key header (the whole mutation operation is one record)',
          'argument idempotencyKey',
          'directive @idempotent(key:)',
        ],
        stored:
          'header key: the whole result (data and errors); argument or directive key: the field value or its error',
        fingerprint:
          'header key: the normalized operation document and its variables; argument or directive key: the field arguments (key left out), its selection as written and the values of the variables it reads',
      },
      {
        ...common,
        endpoint: 'HTTP POST /v1/payments (Hono, @idem/fetch/hono)',
        transport: 'http',
        onFailure: onFailure.http,
        operation: 'POST /v1/payments',
        keySources: ['Idempotency-Key header', 'JSON body field idempotencyKey'],
        stored:
          'the whole response: status (201, or the 500 of a failed channel), body bytes, Content-Type and Location; never Set-Cookie',
        fingerprint:
          'SHA-256 of the method, the path, the media type and the JSON body { amount, currency } (key order and white space aside; the idempotencyKey field left out)',
      },
    ],
  });
}
