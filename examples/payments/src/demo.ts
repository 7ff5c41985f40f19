/**
 * `npm run demo`: the incident of the seed, replayed against the real example with real HTTP
 * calls. A client times out while the payment channel is slow and retries with back-off and
 * the same key: retries inside the retention are answered 409 or replayed; the last one, after
 * the retention, runs as a new request and the channel charges twice. Then what idem adds:
 * the `expiredKeyReused` event and `idem explain` showing both generations (R2, A1), a
 * client (`idempotencyLink`) that refuses the retry the server would run as new, and the app
 * that then reconciles: it looks the key up, finds the first charge, and pays nothing again.
 * Last, replay or resume (issue 35, Stripe v1 / v2): a payment whose channel times out after the
 * reservation (amount 14) is replayed as a failure under `IDEM_SEMANTICS=v1`, and completed by
 * the retry under `IDEM_SEMANTICS=v2` (a second server over the same database), with one
 * reservation and one charge.
 *
 * Exits 0 when every answer is the one narrated, 1 with a one-line reason otherwise.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { createTRPCClient, httpLink } from '@trpc/client';
import { idempotencyHeaders, idempotencyLink, reconcile, RetentionWindowExceededError } from '@idem/trpc/client';
import type { PaymentsRouter } from './trpc.ts';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const MAIN = fileURLToPath(new URL('./main.ts', import.meta.url));
const IDEM_BIN = join(ROOT, 'packages/drizzle/bin/idem.js');

/** The server's retention (IDEM_TTL) and the channel's slowness (CHANNEL_DELAY_MS). */
const RETENTION_MS = 2000;
const CHANNEL_DELAY_MS = 1200;
/** How long the client waits for an answer before it gives up. */
const CLIENT_TIMEOUT_MS = 400;
/** The client's first back-off step. */
const BACKOFF_MS = 100;
/** How far past the retention the last retry comes. */
const PAST_RETENTION_MS = 300;

const PAYMENT = { amount: 4200, currency: 'EUR' };
/** The demo pays as the account `demo`: the shared anonymous account's keys cannot be looked up (403). */
const AUTHORIZATION = { authorization: 'Bearer demo' };
const SCOPE = 'demo/payments.create';
/**
 * Each call on a connection of its own: the demo pauses longer than the server keeps an idle
 * connection open (5 s), and a loaded machine would otherwise reuse one the server just closed.
 */
const CONNECTION = { connection: 'close', ...AUTHORIZATION };

/** An answer the demo did not expect: printed on one line, exit 1. */
class DemoFailure extends Error {}

interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

interface LedgerEntry {
  id: string;
  amount: number;
  currency: string;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `promise`, or a DemoFailure after `ms`; the timer never outlives the promise. */
async function within<T>(ms: number, promise: Promise<T>, reason: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new DemoFailure(reason)), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

let t0 = 0;
let firstCallWallClock = 0;
const clock = () => `+${((performance.now() - t0) / 1000).toFixed(2)}s`.padStart(7);
const say = (line = '') => console.log(line);
const step = (line: string) => say(`[${clock()}] ${line}`);
const detail = (line: string) => say(`           ${line}`);

function expect(condition: unknown, reason: string): asserts condition {
  if (!condition) throw new DemoFailure(reason);
}

/** The example, started as `npm start` would: its `[idem]` event lines are kept. */
class ExampleServer {
  readonly events: Array<Record<string, any>> = [];
  readonly #child: ChildProcess;
  readonly #stderr: string[] = [];
  readonly #exited: Promise<number | null>;
  url = '';

  constructor(databaseFile: string, env: Record<string, string> = {}) {
    this.#child = spawn(process.execPath, ['--import', 'tsx', MAIN], {
      cwd: ROOT,
      env: {
        ...process.env,
        PORT: '0',
        DATABASE_URL: `file:${databaseFile}`,
        IDEM_TTL: `${RETENTION_MS / 1000}s`,
        IDEM_LEASE: '30s',
        CHANNEL_DELAY_MS: String(CHANNEL_DELAY_MS),
        IDEM_SEMANTICS: 'v1',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.#exited = new Promise((resolve) => this.#child.once('exit', (code) => resolve(code)));
    createInterface({ input: this.#child.stderr! }).on('line', (line) => this.#stderr.push(line));
  }

  /** Resolves with the URL once the server prints `listening on`. */
  async started(): Promise<string> {
    const lines = createInterface({ input: this.#child.stdout! });
    const listening = new Promise<string>((resolve) => {
      lines.on('line', (line) => {
        const port = /^\[payments\] listening on http:\/\/localhost:(\d+)/.exec(line)?.[1];
        if (port) resolve(`http://127.0.0.1:${port}`);
        if (line.startsWith('[idem] ')) this.events.push(JSON.parse(line.slice('[idem] '.length)));
      });
    });
    const exited = this.#exited.then((code) => {
      throw new DemoFailure(
        `the example exited with ${code} before listening: ${this.#stderr.join(' ') || 'no output'}`,
      );
    });
    this.url = await within(
      60_000,
      Promise.race([listening, exited]),
      'the example did not print "listening on" within 60 s',
    );
    return this.url;
  }

  /** The first event of `type`, waiting for the line to arrive through the pipe (15 s at most). */
  async event(type: string): Promise<Record<string, any>> {
    for (let waited = 0; waited < 15_000; waited += 50) {
      const event = this.events.find((candidate) => candidate.type === type);
      if (event) return event;
      await sleep(50);
    }
    throw new DemoFailure(`the server emitted no ${type} event`);
  }

  async stop(): Promise<void> {
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return;
    this.#child.kill('SIGTERM');
    try {
      await within(5000, this.#exited, 'the example did not stop within 5 s');
    } catch {
      this.#child.kill('SIGKILL');
      await this.#exited;
    }
  }
}

async function createPayment(url: string, key: string, signal?: AbortSignal): Promise<Answer> {
  const response = await fetch(`${url}/trpc/payments.create`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, ...CONNECTION },
    body: JSON.stringify(PAYMENT),
    ...(signal ? { signal } : {}),
  });
  return { status: response.status, headers: response.headers, body: await response.json() };
}

async function ledger(url: string): Promise<LedgerEntry[]> {
  const response = await fetch(`${url}/trpc/payments.ledger`, { headers: CONNECTION });
  expect(response.ok, `GET /trpc/payments.ledger answered ${response.status}`);
  return ((await response.json()) as { result: { data: LedgerEntry[] } }).result.data;
}

function showLedger(entries: LedgerEntry[]): void {
  detail(`ledger: ${entries.length} ${entries.length === 1 ? 'entry' : 'entries'}`);
  for (const entry of entries) detail(`  ${entry.id}  ${entry.amount} ${entry.currency}`);
}

function runIdem(
  args: string[],
  databaseFile: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [IDEM_BIN, ...args], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: `file:${databaseFile}` },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * When the server's retention of `key` ends, as the database recorded it (`idem explain --json`):
 * expiry is the database clock at the claim plus the retention, and on a loaded machine the claim
 * lands well after the client sent its first call.
 */
async function storedExpiry(key: string, databaseFile: string): Promise<number> {
  const explain = await runIdem(['explain', key, '--scope', SCOPE, '--json'], databaseFile);
  expect(explain.code === 0, `idem explain --json exited with ${explain.code}: ${explain.stderr.trim()}`);
  const generations =
    (JSON.parse(explain.stdout) as { scopes: Array<{ generations: Array<{ expiresAt: string }> }> }).scopes[0]
      ?.generations ?? [];
  expect(
    generations.length === 1,
    `idem explain --json lists ${generations.length} generations of the key, expected 1`,
  );
  return Date.parse(generations[0]!.expiresAt);
}

/** A database timestamp, and how long after the first call it was (same machine, same clock). */
const at = (iso: string) => `${iso} (+${((Date.parse(iso) - firstCallWallClock) / 1000).toFixed(2)}s)`;

/** A plain HTTP payment (`POST /v1/payments`), as the account `demo`. */
async function restPayment(url: string, key: string, payment: { amount: number; currency: string }): Promise<Answer> {
  const response = await fetch(`${url}/v1/payments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, ...CONNECTION },
    body: JSON.stringify(payment),
  });
  return { status: response.status, headers: response.headers, body: await response.json() };
}

/** `GET /v1/ledger?key=…`: what the ledger holds for one of the account's keys. */
async function keyLedger(url: string, key: string): Promise<KeyCounts> {
  const response = await fetch(`${url}/v1/ledger?key=${encodeURIComponent(key)}`, { headers: CONNECTION });
  expect(response.ok, `GET /v1/ledger answered ${response.status}`);
  return (await response.json()) as KeyCounts;
}

interface KeyCounts {
  reservations: number;
  reserveRuns: number;
  charges: number;
  timeouts: number;
}

/** One answer on one line: status, the idem headers, and the payment or the problem's detail. */
function showAnswer(answer: Answer): void {
  const marks = [
    answer.headers.get('idempotent-replayed') === 'true' ? 'Idempotent-Replayed: true' : undefined,
    answer.headers.get('idempotent-resumable') === 'true' ? 'Idempotent-Resumable: true' : undefined,
  ].filter(Boolean);
  const what =
    typeof answer.body?.id === 'string'
      ? `payment ${answer.body.id}`
      : `"${answer.body?.detail ?? answer.body?.title}"`;
  detail(`${answer.status}${marks.length > 0 ? `, ${marks.join(', ')}` : ''}: ${what}`);
}

function showCounts({ reservations, reserveRuns, charges, timeouts }: KeyCounts) {
  detail(
    `GET /v1/ledger?key=…: reservations ${reservations} (reserve ran ${reserveRuns}×), charges ${charges}, timeouts ${timeouts}`,
  );
}

const TIMES_OUT = { amount: 14, currency: 'EUR' };

/**
 * Step 8, replay or resume: amount 14 reserves, then the channel times out on its first charge
 * attempt under the payment's downstream key (504, nothing charged). Under v1 the retry gets the
 * stored 504; under v2 it completes the payment: the reservation is not made again, the charge is.
 */
async function replayOrResume(v1: ExampleServer, v2: ExampleServer): Promise<void> {
  say('8. Replay or resume (Stripe v1 / v2). Amount 14: the payment reserves the amount, then the channel');
  say('   times out on the first charge attempt (504, nothing charged); the next attempt with the same');
  say('   downstream key charges. POST /v1/payments {"amount":14,"currency":"EUR"}, one key per server.');
  say();
  say(`   v1: the server above, IDEM_SEMANTICS=v1 (onFailure: 'replay', the default).`);
  const replayKey = randomUUID();
  const failed = await restPayment(v1.url, replayKey, TIMES_OUT);
  expect(failed.status === 504, `amount 14 under v1 answered ${failed.status}, expected 504`);
  expect(failed.headers.get('idempotent-resumable') === null, 'a v1 failure was marked Idempotent-Resumable');
  showAnswer(failed);
  step('   Retry, same key and payload:');
  const replayedFailure = await restPayment(v1.url, replayKey, TIMES_OUT);
  expect(
    replayedFailure.status === 504 && replayedFailure.headers.get('idempotent-replayed') === 'true',
    `the v1 retry answered ${replayedFailure.status} (replayed: ${replayedFailure.headers.get('idempotent-replayed')}), expected the replayed 504`,
  );
  showAnswer(replayedFailure);
  const v1Counts = await keyLedger(v1.url, replayKey);
  expect(
    v1Counts.reservations === 1 && v1Counts.charges === 0,
    `v1 ledger: ${JSON.stringify(v1Counts)}, expected 1 reservation and no charge`,
  );
  showCounts(v1Counts);
  detail('The failure is stored and replayed for the whole retention (E4): this key never completes;');
  detail('the amount stays reserved. The client must look the payment up before paying with a new key.');
  say();

  const v2Url = await v2.started();
  say(`   v2: a second server on the same database, IDEM_SEMANTICS=v2 (onFailure: 'resume'), ${v2Url}.`);
  const resumeKey = randomUUID();
  const resumable = await restPayment(v2Url, resumeKey, TIMES_OUT);
  expect(resumable.status === 504, `amount 14 under v2 answered ${resumable.status}, expected 504`);
  expect(
    resumable.headers.get('idempotent-resumable') === 'true',
    'the v2 failure was not marked Idempotent-Resumable: true',
  );
  showAnswer(resumable);
  showCounts(await keyLedger(v2Url, resumeKey));
  step('   Retry, same key and payload:');
  const completed = await restPayment(v2Url, resumeKey, TIMES_OUT);
  expect(completed.status === 201, `the v2 retry answered ${completed.status}, expected 201`);
  expect(completed.headers.get('idempotent-replayed') === null, 'the v2 retry was replayed; expected it to resume');
  showAnswer(completed);
  const v2Counts = await keyLedger(v2Url, resumeKey);
  expect(
    v2Counts.reservations === 1 && v2Counts.reserveRuns === 1 && v2Counts.charges === 1,
    `v2 ledger: ${JSON.stringify(v2Counts)}, expected 1 reservation (reserved once) and 1 charge`,
  );
  showCounts(v2Counts);
  detail('Resumed (E8): the reserve step was done, its stored result was used; only the charge ran again.');
  step('   Retry once more:');
  const again = await restPayment(v2Url, resumeKey, TIMES_OUT);
  expect(
    again.status === 201 && again.headers.get('idempotent-replayed') === 'true' && again.body.id === completed.body.id,
    `the last v2 retry answered ${again.status}, expected the replayed 201`,
  );
  showAnswer(again);
  showCounts(await keyLedger(v2Url, resumeKey));
  detail('One reservation, one charge, one key.');
}

async function demo(server: ExampleServer, databaseFile: string, resuming: ExampleServer): Promise<void> {
  const key = randomUUID();
  say('idem demo: the incident of the seed, replayed against the payments example.');
  say();
  say(`Server: the example on a fresh SQLite file, retention IDEM_TTL=${RETENTION_MS / 1000}s,`);
  say(`        a slow payment channel CHANNEL_DELAY_MS=${CHANNEL_DELAY_MS}.`);
  const url = await server.started();
  say(`        ${url}, database ${databaseFile}`);
  say(`Client: POST /trpc/payments.create ${JSON.stringify(PAYMENT)}`);
  say(`        Idempotency-Key: ${key}, the same key on every retry.`);
  say();

  t0 = performance.now();
  firstCallWallClock = Date.now();
  step(`1. First call. The client gives up after ${CLIENT_TIMEOUT_MS} ms.`);
  const abort = new AbortController();
  const pending = createPayment(url, key, abort.signal).then(
    (answer) => answer,
    (error: unknown) => (error instanceof Error ? error : new Error(String(error))),
  );
  // Gives up after CLIENT_TIMEOUT_MS, and not before the server claimed the key (its event line):
  // on a loaded machine the request may not even have been read by then.
  await Promise.all([sleep(CLIENT_TIMEOUT_MS), server.event('claimed')]);
  abort.abort();
  const first = await pending;
  if (!(first instanceof Error))
    throw new DemoFailure(
      `the first call was answered ${first.status} within ${CLIENT_TIMEOUT_MS} ms; the channel should still be charging`,
    );
  expect(abort.signal.aborted, `the first call failed: ${first.message}`);
  step('   No answer: the client timed out. On the server the charge goes on.');

  await sleep(BACKOFF_MS);
  step('2. Back-off retry, same key, while the first call is still being processed.');
  const conflict = await createPayment(url, key);
  expect(conflict.status === 409, `the retry during processing answered ${conflict.status}, expected 409`);
  const retryAfter = conflict.headers.get('retry-after');
  expect(retryAfter !== null, 'the 409 carries no Retry-After');
  detail(`409 Conflict, Retry-After: ${retryAfter} (${conflict.body.error.data.idempotency.code}).`);
  detail('Not executed and not stored (E3): the client waits and retries with the same key.');

  // Wait for the first charge to be stored instead of guessing how long the channel takes.
  await server.event('completed');
  let entries = await ledger(url);
  step('   The channel finished the first charge.');
  showLedger(entries);

  step(`3. Retry after the first call completed, still inside the ${RETENTION_MS / 1000}s retention.`);
  const replay = await createPayment(url, key);
  expect(replay.status === 200, `the retry inside the retention answered ${replay.status}, expected 200`);
  expect(
    replay.headers.get('idempotent-replayed') === 'true',
    'the retry inside the retention was not replayed (no Idempotent-Replayed: true)',
  );
  const payment = replay.body.result.data as { id: string };
  detail(`200, Idempotent-Replayed: true: the stored response, payment ${payment.id} (E2).`);
  entries = await ledger(url);
  expect(entries.length === 1, `the ledger has ${entries.length} entries after the replay, expected 1`);
  expect(entries[0]!.id === payment.id, 'the replayed payment is not the one in the ledger');
  showLedger(entries);

  const expiresAt = await storedExpiry(key, databaseFile);
  const wait = expiresAt + PAST_RETENTION_MS - Date.now();
  step(`   The client keeps backing off; it waits ${(Math.max(0, wait) / 1000).toFixed(2)}s more, past the retention.`);
  detail(
    `(The server keeps the key until ${at(new Date(expiresAt).toISOString())}: the database clock at completion plus ${RETENTION_MS / 1000}s.)`,
  );
  if (wait > 0) await sleep(wait);
  step(
    `4. Retry ${(PAST_RETENTION_MS / 1000).toFixed(1)}s after the retention ended. Past its retention the key counts as new:`,
  );
  const again = await createPayment(url, key);
  expect(again.status === 200, `the retry after the retention answered ${again.status}, expected 200`);
  expect(
    again.headers.get('idempotent-replayed') === null,
    'the retry after the retention was replayed; expected a new execution',
  );
  const second = again.body.result.data as { id: string };
  expect(second.id !== payment.id, 'the retry after the retention returned the first payment');
  detail(`200, no Idempotent-Replayed: executed as a new request, payment ${second.id}.`);
  entries = await ledger(url);
  expect(
    entries.length === 2,
    `the ledger has ${entries.length} entries after the retry past the retention, expected 2`,
  );
  showLedger(entries);
  detail('This is the incident: two charges, one key.');
  say();

  say('5. What idem adds: the reuse is not silent (R2), and the key has a history (A1).');
  say();
  const reused = await server.event('expiredKeyReused');
  expect(reused.key === key && reused.scope === SCOPE, 'the expiredKeyReused event names another key or scope');
  const previous = reused.previous as {
    generation: number;
    firstSeenAt: string;
    completedAt: string;
    expiresAt: string;
    status: number;
  };
  expect(
    previous.status === 200 && reused.generation === 2,
    `the expiredKeyReused event says generation ${reused.generation} after a ${previous.status}`,
  );
  say('   The server emitted, when the late retry arrived:');
  say(`   [idem] ${JSON.stringify(reused)}`);
  say(`   generation ${previous.generation} was first seen at ${at(previous.firstSeenAt)},`);
  say(`   completed with ${previous.status} at ${at(previous.completedAt)},`);
  say(
    `   and its retention ended at ${at(previous.expiresAt)}; the key then ran again as generation ${reused.generation}.`,
  );
  say();
  const args = ['explain', key, '--scope', SCOPE];
  say(`   $ DATABASE_URL=file:${databaseFile} npx idem ${args.join(' ')}`);
  const explain = await runIdem(args, databaseFile);
  expect(explain.code === 0, `idem explain exited with ${explain.code}: ${explain.stderr.trim()}`);
  expect(
    /2 generations/.test(explain.stdout) && /^1 .*\n2 /m.test(explain.stdout),
    'idem explain did not list two generations',
  );
  expect(/executed again as generation 2/.test(explain.stdout), 'idem explain did not explain the second execution');
  for (const line of explain.stdout.trimEnd().split('\n')) say(line === '' ? '' : `   ${line}`);
  say();
  const refusal = await clientThatKnowsTheShelfLife(url);
  say();
  await reconcileInsteadOfRetrying(url, refusal);
  say();
  say(`The lesson of the incident: keep retries with one key inside the published retention`);
  say(`(${url}/idempotency), and reconcile instead of retrying once it has passed.`);
  say();
  await replayOrResume(server, resuming);
}

/**
 * Step 6: the same flaky network, with idem's tRPC client link. It reads the retention from the
 * published policy, keeps one key across its retries, and refuses the retry the server would
 * execute as new, telling the caller to reconcile instead.
 */
async function clientThatKnowsTheShelfLife(
  url: string,
): Promise<{ error: RetentionWindowExceededError; ledgerBefore: number }> {
  say('6. The same flaky network, with a client that knows the shelf life: idempotencyLink() from @idem/trpc/client.');
  say(`   It reads the retention from ${url}/idempotency, keeps one key across its retries,`);
  say(
    `   and, as in step 1, it gives up on each attempt after ${CLIENT_TIMEOUT_MS} ms (the client never learns the outcome).`,
  );
  const before = (await ledger(url)).length;
  let attempts = 0;
  /** The server's answer to every attempt, which the client never sees: once all arrived, nothing is still charging. */
  const answers: Array<Promise<unknown>> = [];
  const lossyFetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const attempt = ++attempts;
    // The request reaches the server; its answer never reaches the client in time.
    const headers = new Headers(init?.headers);
    headers.set('connection', 'close');
    const answer = fetch(input, { ...init, headers })
      .then((response) => response.arrayBuffer())
      .catch(() => undefined);
    answers.push(answer);
    await Promise.race([answer, sleep(CLIENT_TIMEOUT_MS)]);
    throw new TypeError(`fetch failed: no answer to attempt ${attempt} within ${CLIENT_TIMEOUT_MS} ms`);
  };
  const client = createTRPCClient<PaymentsRouter>({
    links: [
      idempotencyLink({
        policyUrl: `${url}/idempotency`,
        maxAttempts: 50,
        onRetry: (notice) =>
          detail(
            `no answer (${notice.reason}); attempt ${notice.attempt} with the same key in ${(notice.delayMs / 1000).toFixed(2)}s`,
          ),
      }),
      httpLink({
        url: `${url}/trpc`,
        headers: ({ op }) => ({ ...idempotencyHeaders(op), ...AUTHORIZATION }),
        fetch: lossyFetch,
      }),
    ],
  });
  const started = performance.now();
  const outcome = await client.payments.create.mutate(PAYMENT).then(
    () => undefined,
    (error: unknown) => error,
  );
  const refusal =
    outcome instanceof Error && outcome.cause instanceof RetentionWindowExceededError ? outcome.cause : undefined;
  expect(
    refusal,
    `the link did not stop with RetentionWindowExceededError: ${outcome instanceof Error ? outcome.message : String(outcome)}`,
  );
  detail(
    `after ${attempts} attempts in ${((performance.now() - started) / 1000).toFixed(2)}s the client stopped and said why:`,
  );
  detail(`RetentionWindowExceededError (${refusal.code}): ${refusal.message}`);
  // The first attempt may still be charging on the server: count once the server answered every attempt.
  await within(30_000, Promise.all(answers), 'the server did not answer every attempt of the link within 30 s');
  const entries = await ledger(url);
  expect(entries.length === before + 1, `the ledger grew by ${entries.length - before}, expected exactly 1 charge`);
  detail(
    `ledger: ${entries.length - before} new charge for this payment — charged once; the caller reconciles instead of charging again.`,
  );
  return { error: refusal, ledgerBefore: before };
}

/**
 * Step 7, the end of the incident: the retry that would come after the retention is replaced by
 * a lookup. The app asks the server what became of the key (`reconcile()` through its tRPC
 * client, or `GET /idempotency/keys/{key}`), learns that the first charge happened, and shows it
 * instead of paying again: the ledger still holds one entry.
 */
async function reconcileInsteadOfRetrying(
  url: string,
  { error, ledgerBefore }: { error: RetentionWindowExceededError; ledgerBefore: number },
): Promise<void> {
  say('7. Reconcile instead of retrying: the app looks the key up, with reconcile() from @idem/trpc/client.');
  const client = createTRPCClient<PaymentsRouter>({
    links: [httpLink({ url: `${url}/trpc`, headers: () => CONNECTION })],
  });
  const answer = await reconcile<{ id: string; amount: number; currency: string }>(client, error.key, {
    operation: 'payments.create',
  });
  expect(answer.kind === 'executed', `the lookup of the key answered ${answer.kind}, expected executed`);
  expect(answer.status === 200 && answer.executions === 1, `the lookup found ${answer.executions} executions`);
  const entries = await ledger(url);
  expect(entries.length === ledgerBefore + 1, `the ledger grew by ${entries.length - ledgerBefore}, expected 1`);
  const charged = entries.at(-1)!;
  expect(
    !answer.replayable || answer.value?.id === charged.id,
    'the lookup returned another payment than the one in the ledger',
  );
  detail(
    `executed: already paid at ${answer.at.toISOString()} (${answer.status})${answer.replayable ? `, payment ${answer.value!.id}` : ' (its stored result is no longer replayed: past the retention)'}.`,
  );
  const path = `/idempotency/keys/${encodeURIComponent(error.key)}?operation=payments.create`;
  const response = await fetch(`${url}${path}`, { headers: CONNECTION });
  expect(response.status === 200, `GET ${path} answered ${response.status}`);
  const status = (await response.json()) as {
    generations: Array<{ generation: number; state: string; status: number }>;
  };
  expect(status.generations.length === 1, `GET ${path} lists ${status.generations.length} generations, expected 1`);
  say('   The same over plain HTTP, as the same account:');
  say(`   $ curl -H 'Authorization: Bearer demo' ${url}${path}`);
  for (const generation of status.generations)
    detail(`generation ${generation.generation}: ${generation.state}, status ${generation.status}`);
  detail(`ledger: still ${entries.length - ledgerBefore} charge for this payment. The incident ends with one charge.`);
}

async function main(): Promise<number> {
  const directory = mkdtempSync(join(tmpdir(), 'idem-demo-'));
  const databaseFile = join(directory, 'payments.db');
  const server = new ExampleServer(databaseFile);
  // Step 8's second server, IDEM_SEMANTICS=v2, on the same database (started now, used last).
  const resuming = new ExampleServer(databaseFile, { IDEM_SEMANTICS: 'v2', IDEM_TTL: '', CHANNEL_DELAY_MS: '0' });
  const stop = () => void Promise.all([server.stop(), resuming.stop()]).finally(() => process.exit(130));
  process.once('SIGINT', stop);
  try {
    await demo(server, databaseFile, resuming);
    say();
    say('Demo complete. Stopping the server.');
    return 0;
  } catch (error) {
    const reason = error instanceof Error ? error.message.split('\n')[0] : String(error);
    console.error(`[demo] failed: ${reason}`);
    return 1;
  } finally {
    await Promise.all([server.stop(), resuming.stop()]);
    rmSync(directory, { recursive: true, force: true });
  }
}

process.exitCode = await main();
