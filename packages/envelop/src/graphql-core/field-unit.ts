/**
 * The field unit (SPEC E2, E4): root fields run one after another, each as an execution of its
 * own under its own claim, and the response is assembled as graphql-js assembles one execution
 * of the whole operation: `data` in field order, errors in order, and a null in a non-null root
 * field nulling `data` and stopping the operation ("Normal and Serial Execution"). A refusal of
 * one field is that field's error; when no root field ran, the refusals are the response
 * (400/409/422/503 with `Retry-After`).
 */
import { GraphQLError, isNonNullType, type ExecutionResult } from 'graphql';
import { isIdempotencyError, type IdempotencyError } from '@idem/core';
import type { PlannedUnit, RootField } from './plan.js';
import type { UnitAnswer } from './unit.js';

/**
 * `extensions.idempotency` of a response that contains replayed outcomes (E2) or failures that
 * left their key resumable (E8).
 * Operation unit: `{ replayed: true }`, or `{ replayed: false, resumable: true }`. Field unit:
 * `replayedFields` lists the response keys (aliases or field names) whose stored outcome was
 * replayed; `replayed` is true only when every root field was replayed, i.e. nothing executed for
 * this response; `resumableFields` lists those whose failure left their key resumable, and
 * `resumable` is true when there is one: retry the operation with the same keys to complete it.
 */
export interface IdempotencyResultExtension {
  replayed: boolean;
  replayedFields?: string[];
  /** E8: a failure under `onFailure: 'resume'` left the key resumable; the host answers `Idempotent-Resumable: true`. */
  resumable?: true;
  resumableFields?: string[];
}

/**
 * Runs the field unit's `fields` in order through `run`; `refusalError` builds the GraphQLError
 * of a refusal, with `http` when it is the whole response's status. `__typename` is the root type's name.
 */
export async function runFieldUnit(
  fields: ReadonlyArray<{ field: RootField; run?: PlannedUnit }>,
  rootTypeName: string,
  run: (unit: PlannedUnit) => Promise<UnitAnswer>,
  refusalError: (error: IdempotencyError, field: RootField, http: boolean) => GraphQLError,
): Promise<ExecutionResult> {
  const errors: Array<GraphQLError | { refusal: IdempotencyError; field: RootField }> = [];
  const extensions: Record<string, unknown> = {};
  const replayedFields: string[] = [];
  const resumableFields: string[] = [];
  let data: Record<string, unknown> | null = {};
  let ran = 0;
  for (const { field, run: unit } of fields) {
    let slice: ExecutionResult;
    try {
      const { result, replayed, started, resumable } = unit
        ? await run(unit)
        : { result: { data: { [field.responseKey]: rootTypeName } }, replayed: false, started: true, resumable: false };
      if (started) {
        slice = result;
        ran++;
      } else slice = { ...result, data: result.data ?? null };
      if (replayed) replayedFields.push(field.responseKey);
      if (resumable) resumableFields.push(field.responseKey);
    } catch (error) {
      if (!isIdempotencyError(error)) throw error;
      errors.push({ refusal: error, field });
      slice = {
        data: field.definition && isNonNullType(field.definition.type) ? null : { [field.responseKey]: null },
      };
    }
    if (slice.errors) errors.push(...slice.errors);
    if (slice.extensions) Object.assign(extensions, slice.extensions);
    if (!slice.data) {
      data = null;
      break;
    }
    data[field.responseKey] = slice.data[field.responseKey] ?? null;
  }
  const result: ExecutionResult = {};
  if (errors.length > 0)
    result.errors = errors.map((entry) =>
      entry instanceof GraphQLError ? entry : refusalError(entry.refusal, entry.field, ran === 0),
    );
  result.data = data;
  if (replayedFields.length > 0 || resumableFields.length > 0) {
    const keyed = fields.filter(({ run }) => run).length;
    const idempotency: IdempotencyResultExtension = { replayed: replayedFields.length === keyed };
    if (replayedFields.length > 0) idempotency.replayedFields = replayedFields;
    if (resumableFields.length > 0) Object.assign(idempotency, { resumable: true, resumableFields });
    extensions['idempotency'] = idempotency;
  }
  if (Object.keys(extensions).length > 0) result.extensions = extensions;
  return result;
}
