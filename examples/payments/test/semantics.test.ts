/**
 * Replay or resume (issue 35, SPEC E8), black-box over real HTTP on SQLite and PostgreSQL, on
 * every payment transport: tRPC, GraphQL Yoga, Apollo Server and `POST /v1/payments`. The
 * payment runs in two steps, `reserve` then `charge`; amount 14's first charge attempt under each
 * downstream key times out (504, nothing charged), the next charges. `GET /v1/ledger?key=…`
 * counts what the ledger holds for a key: reservations, charges, timeouts.
 *
 * - `IDEM_SEMANTICS=v1` (`onFailure: 'replay'`, E4): the 504 is stored and every retry replays it.
 * - `IDEM_SEMANTICS=v2` (`onFailure: 'resume'`, E8): the 504 is marked `Idempotent-Resumable: true`;
 *   the retry with the same key and payload completes the payment — one reservation, one charge —
 *   on this server or on another instance over the same database; a final failure (a 402
 *   decline) is replayed; a retry with another payload is refused (422); and in atomic mode
 *   (PostgreSQL) the reservation commits at its recovery point with the failure.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTRPCClient, httpLink } from '@trpc/client';
import { idempotencyHeaders, idempotencyLink, type RetryNotice } from '@idem/trpc/client';
import { createIdempotentFetch } from '@idem/envelop/client';
import type { PaymentsRouter } from '../src/trpc.ts';
import type { DrizzleDatabase } from '@idem/drizzle';
import { openPostgresTarget } from '../../../packages/drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import { ExampleFleet } from '../../../test/reliability/support/example-server.ts';
import { ConfigError, readConfig } from '../src/config.ts';
import { get, migrateExample, newKey, startExample, type Reply, type RunningExample } from './http.ts';

const ACCOUNT = 'semantics';
const AUTHORIZATION = { authorization: `Bearer ${ACCOUNT}` };
const TIMES_OUT = { amount: 14, currency: 'EUR' };
const DECLINED = { amount: 15, currency: 'EUR' };
const OTHER = { amount: 4200, currency: 'EUR' };
const ADMIN_TOKEN = 'admin-e8';

async function post(url: string, path: string, body: unknown, headers: Record<string, string>): Promise<Reply> {
  const response = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/graphql-response+json, application/json',
      ...AUTHORIZATION,
      ...headers,
    },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, headers: response.headers, text, body: parsed };
}

const PAY_MUTATION =
  'mutation Pay($input: PaymentInput!) { createPayment(input: $input) { id amount currency createdAt } }';

interface Transport {
  name: string;
  pay(url: string, key: string, payment: { amount: number; currency: string }): Promise<Reply>;
  /** The payment's id in a successful answer, else undefined. */
  paid(reply: Reply): string | undefined;
  successStatus: number;
  /**
   * The HTTP status of amount 13's failure: a GraphQL error without `extensions.http` is in a 200
   * result, and being thrown on purpose it is final under `'resume'` too (the hosts' rule).
   */
  channelFailureStatus: number;
  /** The failure as the client reads it (a GraphQL replay also says so in `extensions`). */
  failure(reply: Reply): unknown;
  /** How this transport marks a resumable failure besides the header (design: tRPC error data, GraphQL extensions). */
  markedResumable(reply: Reply): boolean;
}

const graphqlTransport = (name: string, path: string): Transport => ({
  name,
  pay: (url, key, payment) =>
    post(url, path, { query: PAY_MUTATION, variables: { input: payment } }, { 'idempotency-key': key }),
  paid: (reply) => (reply.body?.errors ? undefined : reply.body?.data?.createPayment?.id),
  successStatus: 200,
  channelFailureStatus: 200,
  failure: (reply) => reply.body?.errors,
  markedResumable: (reply) => reply.body?.extensions?.idempotency?.resumable === true,
});

const transports: Transport[] = [
  {
    name: 'tRPC',
    pay: (url, key, payment) => post(url, '/trpc/payments.create', payment, { 'idempotency-key': key }),
    paid: (reply) => reply.body?.result?.data?.id,
    successStatus: 200,
    channelFailureStatus: 500,
    failure: (reply) => reply.body?.error,
    markedResumable: (reply) => reply.body?.error?.data?.idempotentResumable === true,
  },
  graphqlTransport('GraphQL Yoga', '/graphql'),
  graphqlTransport('Apollo Server', '/apollo/graphql'),
  {
    // The key as the field's argument: the field is the unit (its outcome, not the whole result).
    name: 'GraphQL Yoga, argument key',
    pay: (url, key, payment) =>
      post(
        url,
        '/graphql',
        {
          query:
            'mutation Pay($input: PaymentInput!, $key: String) { createPayment(input: $input, idempotencyKey: $key) { id amount currency createdAt } }',
          variables: { input: payment, key },
        },
        {},
      ),
    paid: (reply) => (reply.body?.errors ? undefined : reply.body?.data?.createPayment?.id),
    successStatus: 200,
    channelFailureStatus: 200,
    failure: (reply) => reply.body?.errors,
    markedResumable: (reply) => reply.body?.extensions?.idempotency?.resumable === true,
  },
  {
    name: 'REST (POST /v1/payments)',
    pay: (url, key, payment) => post(url, '/v1/payments', payment, { 'idempotency-key': key }),
    paid: (reply) => (reply.status === 201 ? reply.body?.id : undefined),
    successStatus: 201,
    channelFailureStatus: 500,
    failure: (reply) => reply.text,
    // The handler's own response: the header is the mark.
    markedResumable: (reply) => reply.headers.get('idempotent-resumable') === 'true',
  },
];

/** What the ledger holds for the key, over HTTP: `GET /v1/ledger`, and the same from tRPC and GraphQL. */
async function counts(url: string, key: string) {
  const reply = await get(url, `/v1/ledger?key=${encodeURIComponent(key)}`, AUTHORIZATION);
  expect(reply.status, reply.text).toBe(200);
  const input = encodeURIComponent(JSON.stringify({ key }));
  const trpc = await get(url, `/trpc/payments.keyLedger?input=${input}`, AUTHORIZATION);
  expect(trpc.body?.result?.data, trpc.text).toEqual(reply.body);
  const graphql = await post(
    url,
    '/graphql',
    {
      query: 'query ($key: String!) { keyLedger(key: $key) { account key reservations reserveRuns charges timeouts } }',
      variables: { key },
    },
    {},
  );
  expect(graphql.body?.data?.keyLedger, graphql.text).toEqual(reply.body);
  const { reservations, reserveRuns, charges, timeouts } = reply.body as Record<string, number>;
  // Every story here runs the reservation once: a resume skips the completed `reserve` step.
  expect(reserveRuns, 'reserveRuns').toBe(reservations);
  return { reservations, charges, timeouts };
}

const resumable = (reply: Reply) => reply.headers.get('idempotent-resumable');
const replayed = (reply: Reply) => reply.headers.get('idempotent-replayed');

const databases: Array<{
  name: string;
  postgres: boolean;
  open(): Promise<{ db: DrizzleDatabase; close(): Promise<void> }>;
}> = [
  { name: 'SQLite', postgres: false, open: () => openSqliteTarget() },
  { name: 'PostgreSQL', postgres: true, open: () => openPostgresTarget({ schemaPrefix: 'idem_example_e8' }) },
];

describe.each(databases)('replay or resume (IDEM_SEMANTICS) on $name', ({ postgres, open }) => {
  let database: { db: DrizzleDatabase; close(): Promise<void> };
  let v1: RunningExample;
  let v2: RunningExample;
  /** A second instance of the v2 server over the same database (another process in production). */
  let v2b: RunningExample;
  let atomicV2: RunningExample | undefined;
  beforeAll(async () => {
    database = await open();
    await migrateExample(database.db);
    [v1, v2, v2b, atomicV2] = await Promise.all([
      startExample(database.db, { IDEM_TTL: '30m', IDEM_SEMANTICS: 'v1' }),
      startExample(database.db, { IDEM_TTL: '30m', IDEM_SEMANTICS: 'v2', ADMIN_TOKEN }),
      startExample(database.db, { IDEM_TTL: '30m', IDEM_SEMANTICS: 'v2' }),
      postgres ? startExample(database.db, { IDEM_TTL: '30m', IDEM_SEMANTICS: 'v2' }, { atomic: true }) : undefined,
    ]);
  });
  afterAll(async () => {
    await Promise.all([v1?.close(), v2?.close(), v2b?.close(), atomicV2?.close()]);
    await database?.close();
  });

  it('R4/E8: the published policy names the mode of every payment endpoint: replay under v1, resume under v2', async () => {
    for (const [example, mode] of [
      [v1, 'replay'],
      [v2, 'resume'],
    ] as const) {
      const policy = await get(example.url, '/idempotency', { accept: 'application/json' });
      expect(policy.status).toBe(200);
      const endpoints = policy.body.endpoints as Array<{ operation: string; onFailure?: string }>;
      expect(endpoints.map((endpoint) => [endpoint.operation, endpoint.onFailure])).toEqual([
        ['payments.create', mode],
        ['Mutation.createPayment', mode],
        ['POST /v1/payments', mode],
      ]);
      const page = await get(example.url, '/idempotency', { accept: 'text/html' });
      expect(page.text).toContain(mode === 'resume' ? 'resumed on retry (Stripe v2)' : 'replayed (Stripe v1)');
    }
  });

  it('A1/E8: the admin timeline shows the generation mode, its attempts and the steps done', async () => {
    const key = newKey();
    const trpc = transports[0]!;
    expect((await trpc.pay(v2.url, key, TIMES_OUT)).status).toBe(504);
    const scope = `${ACCOUNT}/payments.create`;
    const path = `/admin/timeline?scope=${encodeURIComponent(scope)}&key=${encodeURIComponent(key)}`;
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const cells = async () => {
      const page = await get(v2.url, path, admin);
      expect(page.status).toBe(200);
      return /<tbody><tr>(.*?)<\/tr>/.exec(page.text)![1]!.split('</td><td>').slice(-3);
    };
    expect(await cells()).toEqual(['resume (Stripe v2): resumable', '1', 'reserve</td>']);
    expect((await get(v2.url, path, admin)).text).toMatch(
      /its attempt 1 failed with 504 error after the steps reserve, resumable: a retry with the same key and payload runs it again/,
    );
    expect((await trpc.pay(v2.url, key, TIMES_OUT)).status).toBe(200);
    expect(await cells()).toEqual(['resume (Stripe v2)', '2', 'reserve, charge</td>']);
  });

  it("E8: the mode is the record's, fixed at its claim: a 504 claimed on the v1 server is replayed by a v2 server, never resumed", async () => {
    const key = newKey();
    const trpc = transports[0]!;
    const first = await trpc.pay(v1.url, key, TIMES_OUT);
    expect(first.status).toBe(504);
    const onV2 = await trpc.pay(v2.url, key, TIMES_OUT);
    expect(onV2.status).toBe(504);
    expect(replayed(onV2)).toBe('true');
    expect(resumable(onV2)).toBeNull();
    expect(await counts(v2.url, key)).toEqual({ reservations: 1, charges: 0, timeouts: 1 });
  });

  describe('clients (E8): a failure marked resumable is retried with the same key; an unmarked one is not', () => {
    /** The tRPC link over `url`, the keys its requests carried and its retry notices. */
    const trpcWithLink = (url: string) => {
      const keys: string[] = [];
      const notices: RetryNotice[] = [];
      const client = createTRPCClient<PaymentsRouter>({
        links: [
          idempotencyLink({ policyUrl: `${url}/idempotency`, initialDelayMs: 10, onRetry: (n) => notices.push(n) }),
          httpLink({
            url: `${url}/trpc`,
            headers: ({ op }) => ({ ...idempotencyHeaders(op), ...AUTHORIZATION }),
            fetch: (input, init) => {
              keys.push(new Headers(init?.headers as HeadersInit).get('idempotency-key')!);
              return fetch(input, init as RequestInit);
            },
          }),
        ],
      });
      return { client, keys, notices };
    };

    it('idempotencyLink (tRPC): under v2 the resumable 504 is retried with its key and the call resolves with the payment', async () => {
      const { client, keys, notices } = trpcWithLink(v2.url);
      const payment = await client.payments.create.mutate(TIMES_OUT);
      expect(payment.id).toMatch(/^pay_/);
      expect(notices.map((notice) => notice.reason)).toEqual(['resumable']);
      expect(new Set(keys).size).toBe(1);
      expect(keys).toHaveLength(2);
      // The key as the server scopes it: the header's sf-string without its quotes.
      expect(await counts(v2.url, JSON.parse(keys[0]!))).toEqual({ reservations: 1, charges: 1, timeouts: 1 });
    });

    it('idempotencyLink (tRPC): under v1 the 504 is final, not retried: the call rejects after one request', async () => {
      const { client, keys, notices } = trpcWithLink(v1.url);
      await expect(client.payments.create.mutate(TIMES_OUT)).rejects.toThrow(/timed out/);
      expect(notices).toEqual([]);
      expect(keys).toHaveLength(1);
    });

    it('createIdempotentFetch (GraphQL): under v2 the resumable 504 is retried with its key and answers the payment', async () => {
      const sent: string[] = [];
      const idempotentFetch = createIdempotentFetch({
        policyUrl: `${v2.url}/idempotency`,
        initialDelayMs: 10,
        fetch: (input, init) => {
          // The mutations' keys (the policy is read through this fetch too, without one).
          const key = new Headers(init?.headers).get('idempotency-key');
          if (key !== null) sent.push(key);
          return fetch(input, init);
        },
      });
      const response = await idempotentFetch(`${v2.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...AUTHORIZATION },
        body: JSON.stringify({ query: PAY_MUTATION, variables: { input: TIMES_OUT } }),
      });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { data: { createPayment: { id: string } } };
      expect(body.data.createPayment.id).toMatch(/^pay_/);
      expect(sent).toHaveLength(2);
      expect(new Set(sent).size).toBe(1);
      expect(await counts(v2.url, JSON.parse(sent[0]!))).toEqual({ reservations: 1, charges: 1, timeouts: 1 });
    });
  });

  describe.each(transports)('$name', (transport) => {
    it('E4 (v1): amount 14 times out (504) after the reservation; the retry replays the 504, nothing is charged', async () => {
      const key = newKey();
      const first = await transport.pay(v1.url, key, TIMES_OUT);
      expect(first.status, first.text).toBe(504);
      expect(resumable(first)).toBeNull();
      expect(transport.markedResumable(first)).toBe(false);
      const retry = await transport.pay(v1.url, key, TIMES_OUT);
      expect(retry.status).toBe(504);
      expect(replayed(retry)).toBe('true');
      expect(transport.failure(retry)).toEqual(transport.failure(first));
      expect(transport.paid(retry)).toBeUndefined();
      expect(await counts(v1.url, key)).toEqual({ reservations: 1, charges: 0, timeouts: 1 });
    });

    it('E8 (v2): amount 14 times out, marked Idempotent-Resumable: true; the retry completes it with one reservation and one charge, then replays', async () => {
      const key = newKey();
      const first = await transport.pay(v2.url, key, TIMES_OUT);
      expect(first.status, first.text).toBe(504);
      expect(resumable(first)).toBe('true');
      expect(transport.markedResumable(first)).toBe(true);
      expect(await counts(v2.url, key)).toEqual({ reservations: 1, charges: 0, timeouts: 1 });

      const retry = await transport.pay(v2.url, key, TIMES_OUT);
      expect(retry.status, retry.text).toBe(transport.successStatus);
      expect(replayed(retry)).toBeNull(); // executed (resumed), not replayed
      expect(resumable(retry)).toBeNull();
      const id = transport.paid(retry);
      expect(id).toMatch(/^pay_/);
      expect(await counts(v2.url, key)).toEqual({ reservations: 1, charges: 1, timeouts: 1 });

      const replay = await transport.pay(v2.url, key, TIMES_OUT);
      expect(replayed(replay)).toBe('true');
      expect(transport.paid(replay)).toBe(id);
      expect(await counts(v2.url, key)).toEqual({ reservations: 1, charges: 1, timeouts: 1 });
    });

    it('E8 (v2): the resumable failure retried on another instance over the same database completes there, once', async () => {
      const key = newKey();
      const first = await transport.pay(v2.url, key, TIMES_OUT);
      expect(first.status).toBe(504);
      expect(resumable(first)).toBe('true');
      const elsewhere = await transport.pay(v2b.url, key, TIMES_OUT);
      expect(elsewhere.status, elsewhere.text).toBe(transport.successStatus);
      const id = transport.paid(elsewhere);
      expect(id).toMatch(/^pay_/);
      const back = await transport.pay(v2.url, key, TIMES_OUT);
      expect(replayed(back)).toBe('true');
      expect(transport.paid(back)).toBe(id);
      expect(await counts(v2b.url, key)).toEqual({ reservations: 1, charges: 1, timeouts: 1 });
    });

    it('E8 (v2): amount 13 charges then fails; on tRPC and REST the 500 is resumable and the retry, running the charge step again under the same downstream key, gets the charge made; on GraphQL the PAYMENT_CHANNEL_FAILED error the resolver throws is final (replayed); one charge either way', async () => {
      const key = newKey();
      const payment = { amount: 13, currency: 'EUR' };
      const first = await transport.pay(v2.url, key, payment);
      expect(first.status, first.text).toBe(transport.channelFailureStatus);
      const graphql = transport.channelFailureStatus === 200;
      expect(resumable(first)).toBe(graphql ? null : 'true');
      expect(transport.markedResumable(first)).toBe(!graphql);
      expect(await counts(v2.url, key)).toEqual({ reservations: 1, charges: 1, timeouts: 0 });
      const retry = await transport.pay(v2.url, key, payment);
      if (graphql) {
        expect(replayed(retry)).toBe('true');
        expect(transport.failure(retry)).toEqual(transport.failure(first));
      } else {
        expect(retry.status, retry.text).toBe(transport.successStatus);
        expect(transport.paid(retry)).toMatch(/^pay_/);
      }
      expect(await counts(v2.url, key)).toEqual({ reservations: 1, charges: 1, timeouts: 0 });
    });

    it('E8/E4 (v2): a final failure — amount 15 declined, 402 — is not resumable: stored and replayed', async () => {
      const key = newKey();
      const first = await transport.pay(v2.url, key, DECLINED);
      expect(first.status, first.text).toBe(402);
      expect(resumable(first)).toBeNull();
      expect(transport.markedResumable(first)).toBe(false);
      const retry = await transport.pay(v2.url, key, DECLINED);
      expect(retry.status).toBe(402);
      expect(replayed(retry)).toBe('true');
      expect(transport.failure(retry)).toEqual(transport.failure(first));
      expect(await counts(v2.url, key)).toEqual({ reservations: 1, charges: 0, timeouts: 0 });
    });

    it('E8/F3 (v2): a retry of a resumable failure with another payload is refused (422) and runs nothing; the same payload still completes', async () => {
      const key = newKey();
      const first = await transport.pay(v2.url, key, TIMES_OUT);
      expect(first.status).toBe(504);
      expect(resumable(first)).toBe('true');
      const other = await transport.pay(v2.url, key, OTHER);
      expect(other.status, other.text).toBe(422);
      expect(await counts(v2.url, key)).toEqual({ reservations: 1, charges: 0, timeouts: 1 });
      const same = await transport.pay(v2.url, key, TIMES_OUT);
      expect(same.status).toBe(transport.successStatus);
      expect(await counts(v2.url, key)).toEqual({ reservations: 1, charges: 1, timeouts: 1 });
    });

    // tRPC only: a GraphQL PAYMENT_CHANNEL_FAILED is final, and the REST route answers its 500 as a
    // Response (a value), whose transaction commits with it.
    it.skipIf(!postgres || transport.name !== 'tRPC')(
      "E8/E2 (v2, atomic mode): amount 13's charge is rolled back with its failure each time: every retry is resumable again, and nothing is charged",
      async () => {
        const example = atomicV2!;
        const key = newKey();
        for (let attempt = 1; attempt <= 2; attempt++) {
          const answer = await transport.pay(example.url, key, { amount: 13, currency: 'EUR' });
          expect(answer.status, answer.text).toBe(500);
          expect(resumable(answer)).toBe('true');
        }
        expect(await counts(example.url, key)).toEqual({ reservations: 1, charges: 0, timeouts: 0 });
      },
    );

    it.skipIf(!postgres)(
      'E8/E2 (v2, atomic mode): the reservation commits at its recovery point with the resumable failure; the retry charges once in the same transaction as its outcome',
      async () => {
        const example = atomicV2!;
        const key = newKey();
        const first = await transport.pay(example.url, key, TIMES_OUT);
        expect(first.status, first.text).toBe(504);
        expect(resumable(first)).toBe('true');
        // The charge's failure rolled back to the recovery point after `reserve`: the reservation stays.
        expect(await counts(example.url, key)).toEqual({ reservations: 1, charges: 0, timeouts: 1 });
        const retry = await transport.pay(example.url, key, TIMES_OUT);
        expect(retry.status, retry.text).toBe(transport.successStatus);
        const id = transport.paid(retry);
        expect(id).toMatch(/^pay_/);
        expect(await counts(example.url, key)).toEqual({ reservations: 1, charges: 1, timeouts: 1 });
        const replay = await transport.pay(example.url, key, TIMES_OUT);
        expect(replayed(replay)).toBe('true');
        expect(transport.paid(replay)).toBe(id);
      },
    );
  });
});

describe('E8 across processes: two `npm start` servers (IDEM_SEMANTICS=v2) over one SQLite file', () => {
  const fleet = new ExampleFleet();
  let target: Awaited<ReturnType<typeof openSqliteTarget>>;
  afterAll(async () => {
    await fleet.killAll();
    await target?.close();
  });

  it('E8: the resumable 504 of one process is completed by a retry sent to the other: one reservation, one charge', async () => {
    target = await openSqliteTarget();
    const env = { IDEM_SEMANTICS: 'v2', IDEM_SWEEPER: 'off' };
    const [first, second] = await Promise.all([
      fleet.start({ databaseUrl: `file:${target.file}`, env, name: 'v2#1' }),
      fleet.start({ databaseUrl: `file:${target.file}`, env, name: 'v2#2' }),
    ]);
    for (const transport of [transports[0]!, transports.at(-1)!]) {
      const key = newKey();
      const failed = await transport.pay(first.url, key, TIMES_OUT);
      expect(failed.status).toBe(504);
      expect(resumable(failed)).toBe('true');
      const completed = await transport.pay(second.url, key, TIMES_OUT);
      expect(completed.status, completed.text).toBe(transport.successStatus);
      expect(transport.paid(completed)).toMatch(/^pay_/);
      expect(await counts(first.url, key)).toEqual({ reservations: 1, charges: 1, timeouts: 1 });
      const resumed = await second.waitForEvent((event) => event.type === 'resumed' && event.key === key);
      expect(resumed).toMatchObject({ attempt: 2, previousStatus: 504 });
    }
  }, 120_000);
});

describe("the README's replay-or-resume transcript, run as printed (curl) against IDEM_SEMANTICS=v2", () => {
  const README = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const section = README.slice(README.indexOf('## Replay or resume (Stripe v1 / v2)'));
  const transcript = /```console\n([\s\S]*?)```/.exec(section)![1]!;
  /** Each `$ ` command (continuation lines joined) and the output printed under it. */
  const steps = transcript
    .replace(/\\\n\s*/g, '')
    .split(/^\$ /m)
    .slice(1)
    .map((block) => {
      const [command = '', ...output] = block.split('\n');
      return { command, output: output.join('\n').trim() };
    });
  let target: Awaited<ReturnType<typeof openSqliteTarget>>;
  let example: RunningExample;
  beforeAll(async () => {
    target = await openSqliteTarget();
    await migrateExample(target.db);
    example = await startExample(target.db, { IDEM_SEMANTICS: 'v2' });
  });
  afterAll(async () => {
    await example?.close();
    await target?.close();
  });

  it('E8: each curl answers the status line, the idem headers and the counts printed under it', async () => {
    expect(steps.map((step) => step.command.split(' ')[0])).toEqual(['curl', 'curl', 'curl', 'curl']);
    const port = new URL(example.url).port;
    for (const { command, output } of steps) {
      // The printed command, through a shell as a reader pastes it, on the test's port.
      const stdout = await new Promise<string>((resolve, reject) =>
        execFile('sh', ['-c', command.replace('localhost:3000', `127.0.0.1:${port}`)], (error, out) =>
          error ? reject(error) : resolve(out),
        ),
      );
      if (output.startsWith('HTTP/1.1')) {
        const [head = '', body = ''] = stdout.split('\r\n\r\n');
        expect(head.split('\r\n')[0], command).toBe(output.split('\n')[0]);
        for (const header of ['idempotent-resumable', 'idempotent-replayed'])
          expect(head.toLowerCase().includes(`${header}: true`), `${command}: ${header}`).toBe(
            output.includes(`${header}: true`),
          );
        const printed = JSON.parse(output.split('\n\n')[1]!) as Record<string, unknown>;
        const answered = JSON.parse(body) as Record<string, unknown>;
        // Ids and instants differ from run to run; the rest is as printed.
        for (const volatile of ['id', 'createdAt']) {
          delete printed[volatile];
          delete answered[volatile];
        }
        expect(answered, command).toEqual(printed);
      } else expect(JSON.parse(stdout), command).toEqual(JSON.parse(output));
    }
  });
});

describe('IDEM_SEMANTICS', () => {
  it('E8: v1 by default; v1 or v2 (any case); anything else refuses to start, naming both values', () => {
    expect(readConfig({}).semantics).toBe('v1');
    expect(readConfig({ IDEM_SEMANTICS: '' }).semantics).toBe('v1');
    expect(readConfig({ IDEM_SEMANTICS: 'v1' }).semantics).toBe('v1');
    expect(readConfig({ IDEM_SEMANTICS: 'V2' }).semantics).toBe('v2');
    // IDEM_TTL unset: idem's default retention of the mode, 24h for replay, 30 days for resume.
    expect(readConfig({ IDEM_SEMANTICS: 'v1' }).retentionMs).toBe(24 * 3600_000);
    expect(readConfig({ IDEM_SEMANTICS: 'v2' }).retentionMs).toBe(30 * 24 * 3600_000);
    expect(readConfig({ IDEM_SEMANTICS: 'v2', IDEM_TTL: '2h' }).retentionMs).toBe(2 * 3600_000);
    for (const value of ['v3', 'resume', 'replay', '2', 'stripe-v2']) {
      expect(() => readConfig({ IDEM_SEMANTICS: value })).toThrow(ConfigError);
      expect(() => readConfig({ IDEM_SEMANTICS: value })).toThrow(
        new RegExp(`^IDEM_SEMANTICS must be v1 \\(.*\\) or v2 \\(.*\\), got "${value}"$`),
      );
    }
  });
});
