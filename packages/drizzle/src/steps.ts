/**
 * E8: a record's recovery points (`steps`), kept in one text column as a JSON array of
 * `{ name, result }` in completion order (text, never `jsonb`/`JSON`: the results are the
 * serializer's text and must come back byte for byte).
 *
 * `saveStep` is a compare-and-set on the whole column: the owner reads its steps through the
 * owner guard (`ownedClaim`: its token, `processing`), and writes the new array with one
 * `UPDATE … WHERE <ownedClaim> AND steps = <what it read>`. The write is atomic on its own: a
 * takeover, a completion or a release in between changes the token or the state, and a concurrent
 * `saveStep` of the same owner (steps run with `Promise.all`) changes the column, so the update
 * matches no row and nothing is written; the owner then reads again, and answers false once it is
 * no longer the owner. No step is ever lost or written by a fenced-out owner. The array is built
 * here, in one place, rather than with each dialect's JSON functions (which differ in how they
 * find an element by name, and MySQL's `JSON_SEARCH` treats `%` and `_` in a name as wildcards).
 *
 * Archiving (sweep, and the history copy of a reused key) drops the results and keeps the names:
 * that runs over many rows in one statement, so it is the dialect's JSON functions
 * ({@link sqliteStepNames}, {@link pgStepNames}, {@link mysqlStepNames}).
 */
import type { StoredStep } from '@idem/core/store';
import { sql, type SQL, type SQLWrapper } from 'drizzle-orm';

/** The steps column of a record as the store contract's steps; a value that is not an array of steps reads as none. */
export function parseSteps(text: string | null | undefined): StoredStep[] {
  if (!text) return [];
  const parsed: unknown = JSON.parse(text);
  if (!Array.isArray(parsed)) return [];
  return parsed.flatMap((entry: unknown): StoredStep[] => {
    if (typeof entry !== 'object' || entry === null) return [];
    const { name, result } = entry as { name?: unknown; result?: unknown };
    if (typeof name !== 'string') return [];
    return [{ name, result: typeof result === 'string' ? result : null }];
  });
}

/** `steps` with `step` appended, or put in place of the entry of the same name. */
export function withStep(steps: readonly StoredStep[], step: StoredStep): StoredStep[] {
  const at = steps.findIndex((each) => each.name === step.name);
  if (at === -1) return [...steps, { name: step.name, result: step.result }];
  return steps.map((each, i) => (i === at ? { name: step.name, result: step.result } : each));
}

/** The text the column holds for `steps`. */
export function stepsText(steps: readonly StoredStep[]): string {
  return JSON.stringify(steps.map(({ name, result }) => ({ name, result })));
}

/**
 * How many times `saveStep` reads again after its compare-and-set lost to the same owner's other
 * steps. Each lost round means another step was written (the loop is lock-free), so n steps run
 * together settle within n rounds.
 */
const MAX_STEP_ROUNDS = 100;

/**
 * `saveStep` over a dialect's two statements: `read` answers the owner's steps column (undefined
 * when `owner` does not own the `processing` claim), `write` replaces it if it still holds `from`
 * (true when it did). False when the owner is fenced out.
 */
export async function saveStepByCompareAndSet<O>(
  owner: O,
  step: StoredStep,
  read: (owner: O) => Promise<string | undefined>,
  write: (owner: O, from: string, to: string) => Promise<boolean>,
): Promise<boolean> {
  for (let round = 0; round < MAX_STEP_ROUNDS; round++) {
    const from = await read(owner);
    if (from === undefined) return false;
    const to = stepsText(withStep(parseSteps(from), step));
    // Already stored as it is (MySQL would count the update as no affected row): the read was owned.
    if (to === from) return true;
    if (await write(owner, from, to)) return true;
  }
  throw new Error(`[idem] saveStep did not settle after ${MAX_STEP_ROUNDS} rounds of concurrent steps on one claim`);
}

/** SQLite: the steps' names with null results, in order (`json_each` walks the array in order). */
export function sqliteStepNames(steps: SQLWrapper): SQL {
  return sql`(SELECT coalesce(json_group_array(json_object('name', json_extract(value, '$.name'), 'result', NULL)), '[]') FROM json_each(${steps}))`;
}

/** PostgreSQL: the steps' names with null results, in order (`WITH ORDINALITY`). */
export function pgStepNames(steps: SQLWrapper): SQL {
  return sql`(SELECT coalesce(json_agg(json_build_object('name', idem_s.value->>'name', 'result', NULL) ORDER BY idem_s.ordinality), '[]'::json)::text FROM json_array_elements(${steps}::json) WITH ORDINALITY AS idem_s (value, ordinality))`;
}

/**
 * MySQL, MariaDB: the steps' names with null results, in order: `JSON_TABLE` yields the array's
 * elements in document order, which `JSON_ARRAYAGG` keeps (MySQL has no `ORDER BY` inside it).
 */
export function mysqlStepNames(steps: SQLWrapper): SQL {
  return sql`(SELECT coalesce(JSON_ARRAYAGG(JSON_OBJECT('name', idem_s.name, 'result', NULL)), '[]') FROM JSON_TABLE(${steps}, '$[*]' COLUMNS (name varchar(1024) CHARACTER SET utf8mb4 PATH '$.name')) AS idem_s)`;
}
