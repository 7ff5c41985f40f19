/**
 * Scenario 8, the GraphQL generative oracle (K2, K4, E1–E4): generated legal mutation operations
 * (see support/graphql-oracle.ts) sent through GraphQL Yoga with `useYogaIdempotency` and through
 * Apollo Server 5 with `useApolloIdempotency` (the same GraphQL core, one store) on SQLite (2,000
 * operations) and PostgreSQL (300), each case through both hosts, three times each: first with
 * its answer dropped, then twice more. The same invariants hold on both hosts. The oracle counts the side effects of every root field, with the claim each ran
 * under, and checks:
 *
 * - E1/E4: every side effect is recorded under exactly one key: its record is completed in the store;
 * - E2: a resend with the same keys runs nothing new and answers the same `data`;
 * - K2/E4: no side effect runs without a claim when the operation carries any key or requires one;
 * - E4: two root fields never share one stored outcome (no claim twice, every value made by its own
 *   field, never a 422 or 409 for a principal whose keys no other request used);
 * - a request error (an answer without `data`) executes nothing;
 * - K4: the clients' `createIdempotentFetch` adds a header key exactly when no root field carries its own.
 *
 * Seeded: `IDEM_ORACLE_SEED` overrides the seed; a failure prints the seed, the path and the
 * operation (fast-check's report), enough to replay it alone.
 */
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_SCHEMA, SQLITE_FILE, type SharedDatabase } from './support/databases.ts';
import {
  clientAddsHeader,
  createOracleApp,
  expectationOf,
  operationModel,
  printOperation,
  type GeneratedRequest,
  type OracleHost,
  type OperationModel,
  type SideEffect,
} from './support/graphql-oracle.ts';

const SEED = Number(process.env['IDEM_ORACLE_SEED'] ?? 20_270_120);
const TIME_LIMIT_MS = 480_000;
const HOSTS: readonly OracleHost[] = ['yoga', 'apollo'];

interface Answer {
  status: number;
  body: { data?: Record<string, unknown> | null; errors?: Array<{ message: string; extensions?: { code?: string } }> };
}

describe.each([
  { kind: SQLITE_FILE, runs: Number(process.env['IDEM_ORACLE_RUNS'] ?? 2000) },
  { kind: POSTGRES_SCHEMA, runs: 300 },
])('the GraphQL oracle on $kind.label', ({ kind, runs }) => {
  let database: SharedDatabase | undefined;
  let app: ReturnType<typeof createOracleApp>;
  beforeAll(async () => {
    if (!kind.available) return;
    database = await kind.open();
    app = createOracleApp(database.store);
  });
  afterAll(async () => {
    await app?.stop();
    await database?.close();
  });

  it.skipIf(!kind.available)(
    `E1–E4, K2, K4: ${runs} generated operations, each sent three times through Yoga and through Apollo Server, run every side effect once under its own claim, or none`,
    async () => {
      const stats = {
        operations: 0,
        executed: 0,
        apolloExecuted: 0,
        unclaimed: 0,
        requestErrors: 0,
        fieldUnits: 0,
        parts: 0,
      };
      const post = async (
        host: OracleHost,
        request: GeneratedRequest,
        model: OperationModel,
        user: string,
        send: number,
      ) =>
        (await app.post(
          host,
          {
            'x-user': user,
            'x-send': String(send),
            ...(model.header === null ? {} : { 'idempotency-key': model.header }),
          },
          request,
        )) as Answer;

      await fc.assert(
        fc.asyncProperty(operationModel, async (model) => {
          const operation = ++stats.operations;
          const request = printOperation(model);
          const expectation = expectationOf(model);
          for (const host of HOSTS) {
            // Each host sends the case as a principal of its own: the two never meet on a record.
            const user = `${host}-op${operation}`;
            const answers: Answer[] = [];
            for (const send of [1, 2, 3]) answers.push(await post(host, request, model, user, send));
            const effects = app.effects.get(user) ?? [];
            const violations = await check(expectation, answers, effects, database!);
            if (
              host === 'yoga' &&
              expectation.ownKeys !== undefined &&
              (await clientAddsHeader(request)) === expectation.ownKeys
            )
              violations.push(
                `K4: createIdempotentFetch ${expectation.ownKeys ? 'adds' : 'does not add'} a header key, but a root field ${expectation.ownKeys ? 'carries' : 'does not carry'} its own`,
              );
            if (violations.length > 0)
              throw new Error(
                `${host}: ${violations.join('\n')}\n\n${request.query}\nvariables ${JSON.stringify(request.variables)} header ${model.header}\nanswers ${JSON.stringify(answers.map((answer) => answer.body))}\neffects ${JSON.stringify(effects)}`,
              );
            if (host === 'apollo' && effects.length > 0) stats.apolloExecuted++;
            if (host !== 'yoga') continue;
            if (effects.length > 0) stats.executed++;
            if (effects.some((effect) => effect.claim === null)) stats.unclaimed++;
            if (effects.some((effect) => effect.claim?.part !== undefined)) stats.parts++;
            if (effects.some((effect) => effect.claim?.scope.endsWith(`/Mutation.${effect.field}`))) stats.fieldUnits++;
            if (!('data' in answers[0]!.body)) stats.requestErrors++;
          }
        }),
        { seed: SEED, numRuns: runs, interruptAfterTimeLimit: TIME_LIMIT_MS, markInterruptAsFailure: true },
      );
      console.log(`[reliability] graphql oracle on ${kind.label} (seed ${SEED}): ${JSON.stringify(stats)}`);
      // The generator explores every way an operation can go, not one of them.
      expect(stats.executed).toBeGreaterThan(runs * 0.2);
      expect(stats.apolloExecuted).toBe(stats.executed);
      expect(stats.requestErrors).toBeGreaterThan(runs * 0.05);
      expect(Math.min(stats.unclaimed, stats.parts, stats.fieldUnits)).toBeGreaterThan(0);
    },
    TIME_LIMIT_MS + 60_000,
  );
});

/** The oracle's checks of one operation's three answers and the side effects they made; each violation in words. */
async function check(
  expectation: ReturnType<typeof expectationOf>,
  answers: Answer[],
  effects: SideEffect[],
  database: SharedDatabase,
): Promise<string[]> {
  const violations: string[] = [];
  // Each operation has a principal of its own: a key no earlier request used cannot have been reused (F3) or be running (E3).
  for (const [index, answer] of answers.entries())
    for (const code of ['IDEMPOTENCY_KEY_REUSED', 'IDEMPOTENCY_REQUEST_IN_PROGRESS'])
      if (answer.body.errors?.some((error) => error.extensions?.code === code))
        violations.push(
          `E4: send ${index + 1} of one operation answered ${code}: two of its root fields met on one record`,
        );
  answers.forEach((answer, index) => {
    const made = effects.filter((effect) => effect.send === index + 1);
    if (!('data' in answer.body) && made.length > 0)
      violations.push(`request error: send ${index + 1} answered without data, yet ran ${made.length} side effect(s)`);
  });
  if (expectation.keyed) {
    const unclaimed = effects.filter((effect) => effect.claim === null);
    if (unclaimed.length > 0)
      violations.push(
        `K2/E4: ${unclaimed.length} side effect(s) ran without a claim in an operation that carries a key or requires one`,
      );
    const resent = effects.filter((effect) => effect.send > 1);
    if (resent.length > 0) violations.push(`E2: the resends ran ${resent.length} new side effect(s)`);
    const [first, ...rest] = answers.map((answer) => answer.body.data);
    if (rest.some((data) => !isDeepStrictEqual(data, first)))
      violations.push('E2: a resend with the same keys answered other data than the first send');
  }
  const claims = new Set<string>();
  for (const effect of effects) {
    if (!effect.claim) continue;
    const { scope, key, part } = effect.claim;
    const claim = JSON.stringify([scope, key, part ?? null]);
    if (claims.has(claim)) violations.push(`E4: two side effects ran under one claim ${claim}`);
    claims.add(claim);
    const record = await database.store.get(scope, key);
    if (record?.state !== 'completed')
      violations.push(
        `E4: the side effect ${effect.id} ran under ${claim}, whose record is ${record?.state ?? 'absent'}, not completed`,
      );
  }
  for (const answer of answers)
    for (const [responseKey, value] of Object.entries(answer.body.data ?? {})) {
      if (value === null || typeof value !== 'object') continue;
      const { id, by } = value as { id?: string; by?: string };
      const effect = effects.find((candidate) => candidate.id === id);
      if (by !== responseKey || effect?.responseKey !== responseKey)
        violations.push(
          `E4: ${responseKey} answered ${id}, made by the side effect of ${effect?.responseKey ?? by}: two root fields share one outcome`,
        );
    }
  return violations;
}
