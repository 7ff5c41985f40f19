/**
 * Issue 14, item 14: problem types. Each kind of problem has its own `type` (RFC 9457 makes it
 * the problem type's primary identifier), an absolute URL a client can follow: the policy URL
 * with the code as fragment, resolved against the request when configured relative, each
 * documented under its anchor on the policy page.
 */
import { describe, expect, it } from 'vitest';
import {
  AmbiguousKeyError,
  createPolicyDocument,
  FingerprintMismatchError,
  InputTooDeepError,
  ScopeTooLongError,
  InvalidKeyError,
  KeyExpiredError,
  MissingKeyError,
  RequestInProgressError,
  StoreUnavailableError,
} from '@idem/core';
import { renderPolicyHtml, requestUrlOf, resolveDocumentationUrl } from '@idem/core/http';

const errors = [
  new MissingKeyError(),
  new InvalidKeyError('charset', 'bad'),
  new AmbiguousKeyError(),
  new RequestInProgressError(1),
  new FingerprintMismatchError(),
  new KeyExpiredError({ firstSeenAt: new Date(0), completedAt: null, expiresAt: new Date(1), status: 200 }),
  new StoreUnavailableError(2),
  new InputTooDeepError(256),
  new ScopeTooLongError(2000, 1024),
];

describe('problem types (item 14)', () => {
  it('X1: a missing key, an invalid key, an in-progress request, a reused key, an expired key and an unavailable store each have their own type', () => {
    const types = errors.map((error) => error.toProblem('https://api.example.com/idempotency').type);
    expect(new Set(types).size).toBe(errors.length);
    expect(types).toEqual(errors.map((error) => `https://api.example.com/idempotency#${error.code}`));
    expect(new MissingKeyError().toProblem('https://api.example.com/policy#old').type).toBe(
      'https://api.example.com/policy#idempotency_key_missing',
    );
  });

  it('K2/R4: a relative documentation URL is resolved against the request; an absolute one (a configured base) is kept', () => {
    expect(resolveDocumentationUrl('/idempotency', 'http://127.0.0.1:3000/trpc/payments.create?batch=1')).toBe(
      'http://127.0.0.1:3000/idempotency',
    );
    expect(resolveDocumentationUrl('/idempotency', 'https://shop.example/api/graphql')).toBe(
      'https://shop.example/idempotency',
    );
    expect(resolveDocumentationUrl('https://docs.example/idempotency', 'http://internal:8080/graphql')).toBe(
      'https://docs.example/idempotency',
    );
    expect(resolveDocumentationUrl('/idempotency', undefined)).toBe('/idempotency');
  });

  it('K2: the request URL of a Fetch Request, and of a Node request from its Host header and connection', () => {
    expect(requestUrlOf(new Request('https://shop.example/graphql'))).toBe('https://shop.example/graphql');
    expect(requestUrlOf({ url: '/trpc/x', headers: { host: '127.0.0.1:3000' }, socket: {} })).toBe(
      'http://127.0.0.1:3000/trpc/x',
    );
    expect(requestUrlOf({ url: '/trpc/x', headers: { host: 'shop.example' }, socket: { encrypted: true } })).toBe(
      'https://shop.example/trpc/x',
    );
    expect(requestUrlOf({ url: '/trpc/x', headers: {} })).toBeUndefined();
    expect(requestUrlOf({ url: '/x', headers: { host: 'bad host' } })).toBeUndefined();
    expect(requestUrlOf(undefined)).toBeUndefined();
  });

  it('R4: the policy document lists each problem type, and the HTML page has an anchor for each', () => {
    const policy = createPolicyDocument({ documentationUrl: 'https://api.example.com/idempotency', endpoints: [] });
    expect(policy.statuses.map((status) => status.type)).toEqual(
      policy.statuses.map((status) => `https://api.example.com/idempotency#${status.code}`),
    );
    expect(policy.statuses.map((status) => status.code).sort()).toEqual(errors.map((error) => error.code).sort());
    const html = renderPolicyHtml(policy);
    for (const error of errors) expect(html).toContain(`id="${error.code}"`);
  });
});
