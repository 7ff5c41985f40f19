/**
 * The field unit's response, assembled from one execution per root field as graphql-js would
 * assemble one execution of the whole operation: `data` in field order, errors in order, and a
 * null in a non-null root field nulling `data` and stopping the operation ("Normal and Serial
 * Execution"). A refusal of one field is that field's error; when no root field ran, the
 * refusals are the response (400/409/422/503 with `Retry-After`).
 */
import { GraphQLError, isNonNullType, type ExecutionResult } from 'graphql';
import type { IdempotencyError } from '@idem/core';
import type { RootField } from './plan.js';

/**
 * `extensions.idempotency` of a response that contains replayed outcomes (E2).
 * Operation unit: `{ replayed: true }`. Field unit: `replayedFields` lists the response keys
 * (aliases or field names) whose stored outcome was replayed; `replayed` is true only when every
 * root field was replayed, i.e. nothing executed for this response.
 */
export interface IdempotencyResultExtension {
  replayed: boolean;
  replayedFields?: string[];
}

/** What became of one root field. */
export type FieldOutcome =
  | { ran: ExecutionResult; replayed?: boolean }
  | { notStarted: ExecutionResult }
  | { refused: IdempotencyError };

export class FieldUnitResult {
  readonly #errors: Array<GraphQLError | { refusal: IdempotencyError; field: RootField }> = [];
  readonly #extensions: Record<string, unknown> = {};
  readonly #replayedFields: string[] = [];
  #data: Record<string, unknown> | null = {};
  #ran = 0;

  constructor(readonly rootFields: readonly RootField[]) {}

  /** Adds the outcome of `field`; false when the operation stops there (its `data` became null). */
  add(field: RootField, outcome: FieldOutcome): boolean {
    const { responseKey, definition } = field;
    let slice: ExecutionResult;
    if ('refused' in outcome) {
      this.#errors.push({ refusal: outcome.refused, field });
      if (definition && isNonNullType(definition.type)) slice = { data: null };
      else slice = { data: { [responseKey]: null } };
    } else if ('notStarted' in outcome) {
      slice = { ...outcome.notStarted, data: outcome.notStarted.data ?? null };
    } else {
      slice = outcome.ran;
      this.#ran++;
      if (outcome.replayed) this.#replayedFields.push(responseKey);
    }
    if (slice.errors) this.#errors.push(...slice.errors);
    if (slice.extensions) Object.assign(this.#extensions, slice.extensions);
    if (!slice.data || this.#data === null) {
      this.#data = null;
      return false;
    }
    this.#data[responseKey] = slice.data[responseKey] ?? null;
    return true;
  }

  /** The response; `refusalError` builds the GraphQLError of a refusal, with `http` when it is the whole response's status. */
  result(refusalError: (error: IdempotencyError, field: RootField, http: boolean) => GraphQLError): ExecutionResult {
    const result: ExecutionResult = {};
    const http = this.#ran === 0;
    if (this.#errors.length > 0)
      result.errors = this.#errors.map((entry) =>
        entry instanceof GraphQLError ? entry : refusalError(entry.refusal, entry.field, http),
      );
    result.data = this.#data;
    const extensions = { ...this.#extensions };
    if (this.#replayedFields.length > 0) {
      const keyed = this.rootFields.filter((field) => field.definition).length;
      extensions['idempotency'] = {
        replayed: this.#replayedFields.length === keyed,
        replayedFields: this.#replayedFields,
      } satisfies IdempotencyResultExtension;
    }
    if (Object.keys(extensions).length > 0) result.extensions = extensions;
    return result;
  }
}
