import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createEngine, describeEndpoint, MemoryStore, MissingKeyError, type PolicyDocument } from '@idem/core';
import { createPolicyHandler, prefersJson, resolveDocumentationUrl } from '@idem/core/http';

const endpoints = [{ transport: 'trpc' as const, operation: 'post.create' }];

describe('R4: the published policy as a fetch handler', () => {
  it('answers JSON to clients that ask for it and the HTML page otherwise, with Vary: Accept', async () => {
    const policy = createPolicyHandler({ endpoints });
    const json = policy(new Request('http://app.test/idempotency', { headers: { accept: 'application/json' } }));
    expect(json.status).toBe(200);
    expect(json.headers.get('content-type')).toBe('application/json');
    expect(json.headers.get('vary')).toBe('Accept');
    const document = (await json.json()) as PolicyDocument;
    expect(document.documentationUrl).toBe('http://app.test/idempotency');
    expect(document.endpoints).toMatchObject([
      { endpoint: 'tRPC mutation post.create', retention: '24h', lease: '30s' },
    ]);
    const html = policy(new Request('http://app.test/idempotency', { headers: { accept: 'text/html,*/*;q=0.8' } }));
    expect(html.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(await html.text()).toContain('<tr id="idempotency_key_missing">');
  });

  it.each([
    [undefined, false],
    ['*/*', false],
    ['application/json', true],
    ['application/*', true],
    ['text/html, application/json', false],
    ['application/json;q=0.5, text/html', false],
    ['text/html;q=0.1, application/json', true],
    ['application/json;q=0, */*', false],
    ['APPLICATION/JSON', true],
  ])('Accept %j prefers JSON: %s', (accept, expected) => {
    expect(prefersJson(accept)).toBe(expected);
  });

  it('HEAD answers the headers without a body; other methods get 405 with Allow', async () => {
    const policy = createPolicyHandler({ endpoints });
    const head = policy(new Request('http://app.test/idempotency', { method: 'HEAD' }));
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
    const post = policy(new Request('http://app.test/idempotency', { method: 'POST', body: '{}' }));
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
  });

  it('an absolute documentationUrl (the public URL behind a proxy) is published as it is, whatever host the request names', async () => {
    const policy = createPolicyHandler({ endpoints, documentationUrl: 'https://shop.example/idempotency' });
    const answer = policy(
      new Request('http://localhost:3000/idempotency', { headers: { accept: 'application/json' } }),
    );
    expect(((await answer.json()) as PolicyDocument).statuses[0]!.type).toBe(
      'https://shop.example/idempotency#idempotency_key_missing',
    );
  });

  it("describeEndpoint's defaults are the engine's: 24 hours of retention counted from completion, a 30 s lease", async () => {
    const store = new MemoryStore();
    const engine = createEngine({ store });
    await engine.execute({ scope: 's', key: 'k', fingerprint: null }, () => 'done');
    const record = (await store.get('s', 'k'))!;
    const described = describeEndpoint({ transport: 'graphql', operation: 'Mutation.pay' });
    expect(record.expiresAt.getTime() - record.completedAt!.getTime()).toBe(described.retentionMs);
    expect(described).toMatchObject({ endpoint: 'GraphQL Mutation.pay', required: true, expiredReuse: 'execute' });
    expect(
      describeEndpoint({ transport: 'trpc', operation: 'x', retentionMs: 60_000, leaseMs: undefined }),
    ).toMatchObject({
      retentionMs: 60_000,
      leaseMs: 30_000,
    });
  });

  it('K2, R4: the type of a problem answered at any URL leads to this handler, which has its anchor', async () => {
    const segment = fc.stringMatching(/^[a-z0-9-]{1,8}$/);
    fc.assert(
      await fc.asyncProperty(
        fc.constantFrom('http', 'https'),
        fc.stringMatching(/^[a-z]{1,8}(\.[a-z]{2,5})?$/),
        fc.option(fc.integer({ min: 1, max: 65_535 }), { nil: undefined }),
        fc.array(segment, { maxLength: 3 }),
        fc.oneof(
          fc.array(segment, { minLength: 1, maxLength: 3 }).map((parts) => `/${parts.join('/')}`),
          fc.constant('https://public.example/docs/idempotency'),
        ),
        async (scheme, host, port, path, documentationUrl) => {
          const origin = `${scheme}://${host}${port === undefined ? '' : `:${port}`}`;
          const requestUrl = `${origin}/${path.join('/')}`;
          // As an adapter answers a request without a key at requestUrl.
          const type = new MissingKeyError().toProblem(resolveDocumentationUrl(documentationUrl, requestUrl)).type;
          const [published, fragment] = type.split('#');
          const served = createPolicyHandler({ endpoints, documentationUrl })(
            new Request(published!, { headers: { accept: 'application/json' } }),
          );
          expect(served.status).toBe(200);
          const document = (await served.json()) as PolicyDocument;
          expect(document.documentationUrl).toBe(published);
          expect(document.statuses.map((status) => status.type)).toContain(type);
          const page = await createPolicyHandler({ endpoints, documentationUrl })(new Request(published!)).text();
          expect(page).toContain(`id="${fragment}"`);
        },
      ),
    );
  });
});
