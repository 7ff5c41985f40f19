/**
 * Scenario 4, fuzzed keys (K1–K4): 10,500 generated `Idempotency-Key` values (fixed seed)
 * against both adapters — single header fields through the Fetch handlers in process, repeated
 * fields through Fetch `Headers.append` (joined with ", ") and as separate header lines over
 * real HTTP, and keys in the JSON body (tRPC input field, GraphQL argument). Every answer is a
 * 200 carrying the key the spec reads (see support/key-oracle.ts) or a 400 — never a 5xx — and
 * a refused key reaches no claim: the handler count and the store's claim count stay put and
 * nothing is stored under any reading of it. Each run is its own principal, so its scope is new.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryStore, type IdempotencyStore } from '@idem/core';
import {
  createCountingApp,
  graphqlOrders,
  IN_PROCESS,
  ORDER_ENDPOINTS,
  trpcOrders,
  type OrderEndpoint,
} from './support/counting-app.ts';
import {
  combineFields,
  expectArgumentKey,
  expectDistinctFields,
  expectHeaderValue,
  type Expectation,
} from './support/key-oracle.ts';
import { fetchHeaderValue, httpHeaderWire, jsonKey } from './support/key-arbitraries.ts';
import { postRaw, IDEMPOTENCY_KEY, type Answer } from './support/http.ts';

const SEED = 20_261_130;
const OWS = /^[ \t]+|[ \t]+$/g;
/** Bounds every property's running time; an interrupted property fails instead of passing with fewer runs. */
const TIME_LIMIT_MS = 90_000;
const runs = (numRuns: number) => ({
  seed: SEED,
  numRuns,
  interruptAfterTimeLimit: TIME_LIMIT_MS,
  markInterruptAsFailure: true,
});

/** A store that counts claims: a refused key must never get that far. */
function countingClaims(store: IdempotencyStore): IdempotencyStore & { readonly claims: number } {
  let claims = 0;
  return {
    get claims() {
      return claims;
    },
    claim: (request) => {
      claims++;
      return store.claim(request);
    },
    complete: (args) => store.complete(args),
    saveStep: (args) => store.saveStep(args),
    renew: (args) => store.renew(args),
    countWait: (args) => store.countWait(args),
    release: (args) => store.release(args),
    get: (scope, key) => store.get(scope, key),
    timeline: (scope, key) => store.timeline(scope, key),
    sweep: (options) => store.sweep(options),
    purge: (options) => store.purge(options),
    ping: () => store.ping(),
  };
}

/** Every string a rejected value could have been stored under. */
function readings(values: readonly string[]): string[] {
  const all = new Set<string>();
  for (const value of [...values, values.join(', ')]) {
    for (const trimmed of [value, value.trim(), value.replace(OWS, '')]) {
      all.add(trimmed);
      if (trimmed.length >= 2 && trimmed.startsWith('"'))
        all.add(trimmed.slice(1, trimmed.endsWith('"') ? -1 : undefined));
    }
  }
  all.delete('');
  return [...all];
}

interface Tally {
  runs: number;
  accepted: number;
  rejected: number;
  /** Runs where the oracle allowed either answer, by reason, and what the server did. */
  either: Record<string, { accepted: number; rejected: number }>;
}

const tallies = new Map<string, Tally>();

describe('fuzzed Idempotency-Key values against both adapters (fast-check, seed 20261130)', () => {
  const store = countingClaims(new MemoryStore());
  const app = createCountingApp({ store });
  let http: { url: string; close(): Promise<void> };
  let account = 0;

  beforeAll(async () => {
    http = await app.listen();
  });

  afterAll(async () => {
    await http?.close();
    const total = [...tallies.values()].reduce((sum, tally) => sum + tally.runs, 0);
    console.info(`[reliability] fuzz: ${total} runs ${JSON.stringify(Object.fromEntries(tallies))}`);
  });

  /** Sends one request as a fresh principal and checks the answer against the oracle. */
  async function check(
    label: string,
    endpoint: OrderEndpoint,
    keyIn: 'header' | 'input',
    expectation: Expectation,
    values: readonly string[],
    send: (account: string) => Promise<Answer>,
  ) {
    const principal = `fuzz-${++account}`;
    const scope = endpoint.scope(principal, keyIn);
    const executions = app.executions;
    const claims = store.claims;
    const answer = await send(principal);
    const tally = tallies.get(label) ?? { runs: 0, accepted: 0, rejected: 0, either: {} };
    tallies.set(label, tally);
    tally.runs++;

    expect(answer.status, `never a 5xx: ${answer.text.slice(0, 200)}`).toBeLessThan(500);
    expect([200, 400], answer.text.slice(0, 200)).toContain(answer.status);
    const allowed =
      expectation.kind === 'accepted' ? [expectation.key] : expectation.kind === 'either' ? expectation.keys : [];
    if (expectation.kind === 'either') {
      const bucket = (tally.either[expectation.why] ??= { accepted: 0, rejected: 0 });
      bucket[answer.status === 200 ? 'accepted' : 'rejected']++;
    }
    if (answer.status === 200) {
      tally.accepted++;
      const key = endpoint.order(answer)?.key;
      expect(allowed, `accepted as ${JSON.stringify(key)}`).toContain(key);
      expect(app.executions).toBe(executions + 1);
      expect(await store.get(scope, key!)).toMatchObject({ state: 'completed' });
    } else {
      tally.rejected++;
      expect(
        expectation.kind,
        `refused, though the spec accepts ${JSON.stringify(allowed)}: ${answer.text.slice(0, 200)}`,
      ).not.toBe('accepted');
      expect(endpoint.problemCode(answer)).toMatch(/^idempotency_key_(invalid|missing)$/);
      expect(app.executions).toBe(executions);
      expect(store.claims).toBe(claims);
      for (const reading of readings(values)) expect(await store.get(scope, reading)).toBeNull();
    }
  }

  it.each(ORDER_ENDPOINTS)(
    'K1/K3 ($name, Fetch handler in process): 2,500 single header values are each accepted as the key the spec reads or refused with 400; never a 5xx; a refused key is never claimed',
    async (endpoint) => {
      await fc.assert(
        fc.asyncProperty(fetchHeaderValue, async (value) => {
          await check(
            `${endpoint.name} header (Fetch)`,
            endpoint,
            'header',
            expectHeaderValue(value),
            [value],
            (principal) =>
              endpoint.create(endpoint.handler(app), IN_PROCESS, { amount: 1 }, { key: value, account: principal }),
          );
        }),
        runs(2500),
      );
    },
    110_000,
  );

  it('K1 (both adapters, Fetch Headers.append): 2,000 sets of 2–3 header fields, joined with ", " as Fetch does, are a key or a 400; never a 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...ORDER_ENDPOINTS),
        fc.array(fetchHeaderValue, { minLength: 2, maxLength: 3 }),
        async (endpoint, values) => {
          await check(
            `${endpoint.name} repeated header (Fetch)`,
            endpoint,
            'header',
            expectHeaderValue(combineFields(values)),
            values,
            (principal) =>
              endpoint.create(
                endpoint.handler(app),
                IN_PROCESS,
                { amount: 1 },
                { account: principal, headers: values.map((value) => [IDEMPOTENCY_KEY, value]) },
              ),
          );
        },
      ),
      runs(2000),
    );
  }, 110_000);

  it('K1/K3 (both adapters, real HTTP): 1,500 sets of 1–3 header lines of raw bytes (UTF-8 text, obs-text) — tRPC refuses several lines, Yoga reads them joined — are a key or a 400; never a 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...ORDER_ENDPOINTS),
        fc.array(httpHeaderWire, { minLength: 1, maxLength: 3 }),
        async (endpoint, wire) => {
          // Node's parser trims each line; @idem/trpc reads the lines apart, Yoga as one joined value.
          const lines = wire.map((line) => line.replace(OWS, ''));
          const expectation =
            endpoint === trpcOrders ? expectDistinctFields(lines) : expectHeaderValue(combineFields(lines, OWS));
          await check(`${endpoint.name} header lines (HTTP)`, endpoint, 'header', expectation, lines, (principal) => {
            const path = endpoint === trpcOrders ? '/trpc/orders.create' : '/graphql';
            const body =
              endpoint === graphqlOrders
                ? {
                    query:
                      'mutation ($input: OrderInput!) { createOrder(input: $input) { execution key amount note blob } }',
                    variables: { input: { amount: 1 } },
                  }
                : { amount: 1 };
            return postRaw(`${http.url}${path}`, body, {
              [IDEMPOTENCY_KEY]: wire.length === 1 ? wire[0] : wire,
              authorization: `Bearer ${principal}`,
            });
          });
        },
      ),
      runs(1500),
    );
  }, 110_000);

  it('K4/K3 (tRPC input field, GraphQL argument): 2,000 keys in the JSON body — control characters, lone surrogates, non-ASCII, 0–400 long — are taken as sent or refused with 400; never a 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...ORDER_ENDPOINTS), jsonKey, async (endpoint, value) => {
        await check(`${endpoint.name} body key`, endpoint, 'input', expectArgumentKey(value), [value], (principal) =>
          endpoint.create(
            endpoint.handler(app),
            IN_PROCESS,
            { amount: 1 },
            { key: value, keyIn: 'input', account: principal },
          ),
        );
      }),
      runs(2000),
    );
  }, 110_000);

  it('K1/K3: VT, FF or NBSP around a header key is refused with 400, not trimmed away (only SP and HTAB are whitespace in HTTP)', async () => {
    for (const endpoint of ORDER_ENDPOINTS) {
      for (const padding of ['\u000b', '\u000c', '\u00a0']) {
        const reply = await endpoint.create(
          endpoint.handler(app),
          IN_PROCESS,
          { amount: 1 },
          { key: `${padding}abc${padding}`, keyIn: 'header', account: 'acct_ws' },
        );
        expect(reply.status, `${endpoint.name} with ${JSON.stringify(padding)}`).toBe(400);
      }
    }
  });
});
