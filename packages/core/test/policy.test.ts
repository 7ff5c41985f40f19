import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createPolicyDocument, describeEndpoint } from '@idem/core';
import { renderPolicyHtml } from '@idem/core/http';

const endpoint = {
  endpoint: 'tRPC mutation payments.create',
  transport: 'trpc' as const,
  operation: 'payments.create',
  keySources: ['Idempotency-Key header', 'input field idempotencyKey'],
  required: true,
  retentionMs: 86_400_000,
  leaseMs: 30_000,
  expiredReuse: 'execute' as const,
  stored: 'the output or the error',
  fingerprint: 'SHA-256 of the validated input',
};

describe('published policy (R4)', () => {
  it('R4: publishes each endpoint with readable retention and lease, and bounds client retries by the shortest retention', () => {
    const doc = createPolicyDocument({
      documentationUrl: '/idempotency',
      endpoints: [endpoint, { ...endpoint, endpoint: 'GraphQL Mutation.refund', retentionMs: 1_800_000 }],
    });
    expect(doc.endpoints.map((e) => [e.retention, e.lease])).toEqual([
      ['24h', '30s'],
      ['30m', '30s'],
    ]);
    expect(doc.clientGuidance).toContain('within 30m');
    expect(doc.statuses.map((s) => s.status)).toEqual([400, 400, 400, 400, 400, 409, 422, 422, 503]);
  });

  it('R4/E3w: publishes how long a duplicate in progress waits (waitMs), none unless the endpoint says', () => {
    const doc = createPolicyDocument({
      documentationUrl: '/idempotency',
      endpoints: [endpoint, { ...endpoint, endpoint: 'GraphQL Mutation.refund', waitMs: 5_000 }],
    });
    expect(doc.endpoints.map((e) => [e.waitMs, e.wait])).toEqual([
      [0, 'none (409 at once)'],
      [5_000, '5s'],
    ]);
    expect(renderPolicyHtml(doc)).toContain('<td>5s</td>');
  });

  it('R4/E8: publishes each endpoint\'s onFailure (absent reads as replay), an "On failure" column, and guidance on resumable and final failures', () => {
    const resume = { transport: 'http' as const, operation: 'POST /v1/payments', onFailure: 'resume' as const };
    expect(describeEndpoint(resume)).toMatchObject({ onFailure: 'resume', retentionMs: 30 * 86_400_000 });
    expect(describeEndpoint({ transport: 'http', operation: 'POST /v1/refunds' })).toMatchObject({
      onFailure: 'replay',
      retentionMs: 86_400_000,
    });
    const replayOnly = createPolicyDocument({ documentationUrl: '/idempotency', endpoints: [endpoint] });
    expect(replayOnly.endpoints[0]?.onFailure).toBe('replay');
    expect(replayOnly.clientGuidance).not.toContain('Idempotent-Resumable');
    const mixed = createPolicyDocument({ documentationUrl: '/idempotency', endpoints: [endpoint, resume] });
    expect(mixed.endpoints.map((e) => e.onFailure)).toEqual(['replay', 'resume']);
    expect(mixed.clientGuidance).toContain('Idempotent-Resumable: true');
    expect(mixed.clientGuidance).toContain('never retry it with the same key');
    const html = renderPolicyHtml(mixed);
    expect(html).toContain('<th>On failure</th>');
    expect(html).toContain('<td>replayed (Stripe v1)</td>');
    expect(html).toContain('<td>resumed on retry (Stripe v2)</td>');
  });

  it('R4: renders HTML with every endpoint, escaping what it prints', () => {
    const html = renderPolicyHtml(
      createPolicyDocument({
        documentationUrl: '/idempotency',
        endpoints: [{ ...endpoint, endpoint: '<script>x</script>' }],
      }),
    );
    expect(html).toContain('&lt;script&gt;x&lt;/script&gt;');
    expect(html).not.toContain('<script>');
    expect(html).toContain('<td>24h</td>');
  });

  it('R4: each transport is described in its own words: an http route is never called GraphQL, nor a GraphQL field tRPC', () => {
    const words = { trpc: /\btRPC\b/, graphql: /\bGraphQL\b/, http: /\bHTTP\b/ } as const;
    const transports = ['trpc', 'graphql', 'http'] as const;
    fc.assert(
      fc.property(fc.constantFrom(...transports), fc.stringMatching(/^[A-Za-z./ ]{1,30}$/), (transport, operation) => {
        const described = describeEndpoint({ transport, operation });
        expect(described.endpoint).toMatch(words[transport]);
        expect(described.endpoint).toContain(operation);
        const page = renderPolicyHtml(
          createPolicyDocument({ documentationUrl: '/idempotency', endpoints: [described] }),
        );
        const row = page.slice(page.indexOf('<tbody>'), page.indexOf('</tbody>'));
        const text = JSON.stringify([described.endpoint, described.stored, described.fingerprint]);
        for (const other of transports.filter((t) => t !== transport)) {
          expect(text.replace(operation, '')).not.toMatch(words[other]);
          expect(row.replace(operation, '')).not.toMatch(words[other]);
        }
      }),
    );
    expect(describeEndpoint({ transport: 'http', operation: 'POST /api/orders' })).toMatchObject({
      endpoint: 'HTTP POST /api/orders',
      stored: expect.stringContaining('status'),
      fingerprint: expect.stringContaining('method, the path'),
    });
  });
});
