import { getOperationAST, parse, type ExecutionResult } from 'graphql';
import type { useCSRFPrevention } from '@graphql-yoga/plugin-csrf-prevention';
import { isAsyncIterable } from '@envelop/core';
import type { IdempotencyOptions } from './graphql-core/options.js';
import { isReplayedResult, isResumableResult } from './graphql-core/index.js';
import { createIdempotencyPlugin, type IdempotencyPlugin } from './plugin.js';
import { requestOf } from './graphql-core/request-headers.js';
import { IDEMPOTENCY_KEY_HEADER, IDEMPOTENT_REPLAYED_HEADER } from '@idem/core';
import { IDEMPOTENT_RESUMABLE_HEADER } from '@idem/core/adapter';

/**
 * Headers that prove a preflight, for Yoga's `useCSRFPrevention({ requestHeaders })`:
 * `Idempotency-Key` (idem's own), `X-GraphQL-Yoga-CSRF` (the plugin's default) and
 * `Apollo-Require-Preflight` (Apollo clients, `apollo-upload-client`).
 */
export const DEFAULT_PREFLIGHT_HEADERS: readonly string[] = [
  IDEMPOTENCY_KEY_HEADER,
  'X-GraphQL-Yoga-CSRF',
  'Apollo-Require-Preflight',
];

/** The `csrfPrevention` option of `useYogaIdempotency`. */
export interface CsrfPreventionOptions {
  /** Headers any one of which lets a mutation through. Defaults to {@link DEFAULT_PREFLIGHT_HEADERS}. */
  requestHeaders?: readonly string[];
}

type CsrfPlugin = ReturnType<typeof useCSRFPrevention>;
type RequestParsePayload = Parameters<NonNullable<CsrfPlugin['onRequestParse']>>[0];

/** Options of {@link useYogaIdempotency}: those of `useIdempotency`, and the Yoga-only ones. */
export interface YogaIdempotencyOptions<TContext = Record<string, any>, TTx = unknown>
  extends IdempotencyOptions<TContext, TTx> {
  /**
   * CSRF prevention, by Yoga's own `useCSRFPrevention({ requestHeaders })`: a mutation in a
   * request a browser sends from any site without a preflight (`Content-Type:
   * application/x-www-form-urlencoded`, `multipart/form-data` or `text/plain`) is refused with
   * Yoga's 403 `Required CSRF header(s) not present`, unless it carries one of `requestHeaders`
   * (`Idempotency-Key`, `X-GraphQL-Yoga-CSRF`, `Apollo-Require-Preflight`). Queries are left
   * alone. `false` turns it off: only for APIs that no browser calls with cookies. Defaults to `true`.
   */
  csrfPrevention?: boolean | CsrfPreventionOptions;
}

interface BatchedParams {
  query?: string | null;
  operationName?: string | null;
}

/**
 * The GraphQL Yoga hooks this package uses. Nothing here imports `graphql-yoga` at load time
 * (Yoga's CSRF plugin is imported on Yoga's first request): without Yoga they are never called.
 */
export interface YogaIdempotencyHooks {
  onRequestParse(payload: RequestParsePayload): Promise<{
    onRequestParseDone(payload: { requestParserResult: unknown }): void;
  }>;
  onResultProcess(payload: { result: unknown; setResult(result: any): void }): void;
}

/**
 * {@link useIdempotency} for GraphQL Yoga: the Envelop plugin, plus
 * - the `Idempotent-Replayed: true` response header on a replayed response (E2), and
 *   `Idempotent-Resumable: true` on a failure that left its key resumable (E8, `onFailure: 'resume'`),
 *   set through `extensions.http.headers`, which Yoga turns into headers and leaves out of the body;
 * - the batching rule (`batching: true`): an `Idempotency-Key` header on a batch holding more
 *   than one mutation operation identifies none of them, so each of them is refused with 400
 *   `IDEMPOTENCY_KEY_AMBIGUOUS` and none executes; argument and directive keys work as usual;
 * - CSRF prevention (`csrfPrevention`, on by default): a mutation sent as a form without a
 *   header that proves a preflight is refused by Yoga's `useCSRFPrevention` (403) before anything runs.
 *
 * Statuses and `Retry-After` come from the errors' `extensions.http`, which Yoga reads itself.
 * Used in a plain Envelop setup, the Yoga hooks never run and it behaves as `useIdempotency`.
 */
export function useYogaIdempotency<TContext extends Record<string, any> = Record<string, any>, TTx = unknown>(
  options: YogaIdempotencyOptions<TContext, TTx>,
): IdempotencyPlugin<TContext, TTx> & YogaIdempotencyHooks {
  const { csrfPrevention = true } = options;
  const preflightHeaders =
    csrfPrevention === false
      ? undefined
      : ((csrfPrevention === true ? undefined : csrfPrevention.requestHeaders) ?? DEFAULT_PREFLIGHT_HEADERS);
  // Yoga's plugin imports `graphql-yoga`, an optional peer: loaded here, when the Yoga layer is
  // set up, so plain Envelop never needs it. When it is missing, the server log says so at once
  // (not at the first request), and every request is refused with the same TypeError.
  let csrfPlugin: Promise<CsrfPlugin> | undefined;
  const loadCsrfPlugin = (requestHeaders: readonly string[]) => {
    const loading = import('@graphql-yoga/plugin-csrf-prevention').then(
      ({ useCSRFPrevention }) => useCSRFPrevention({ requestHeaders: [...requestHeaders] }),
      (cause: unknown) => {
        throw new TypeError(
          "[idem] useYogaIdempotency: `csrfPrevention` (on by default) runs Yoga's CSRF plugin: `npm install @graphql-yoga/plugin-csrf-prevention`, or pass `csrfPrevention: false` for an API no browser calls with cookies",
          { cause },
        );
      },
    );
    loading.catch((error: unknown) => console.error(error instanceof Error ? error.message : error));
    return loading;
  };
  if (preflightHeaders) csrfPlugin = loadCsrfPlugin(preflightHeaders);
  const batches = new WeakMap<object, { params: readonly BatchedParams[]; mutations?: number }>();
  const plugin = createIdempotencyPlugin(options, {
    batchedMutations(context) {
      const request = requestOf(context);
      const batch = request && batches.get(request);
      if (!batch) return undefined;
      // Counted only when a header key meets a batch: parsing again is cheap next to a claim.
      batch.mutations ??= batch.params.filter(isMutation).length;
      return batch.mutations;
    },
  });
  return {
    engine: plugin.engine,
    claim: plugin.claim,
    describeEndpoints: plugin.describeEndpoints,
    onPluginInit({ addPlugin }) {
      addPlugin(plugin);
    },
    async onRequestParse(payload) {
      const { request } = payload;
      if (preflightHeaders && !csrfPlugin) csrfPlugin = loadCsrfPlugin(preflightHeaders);
      const csrf = await csrfPlugin;
      return {
        onRequestParseDone({ requestParserResult }) {
          const params = (
            Array.isArray(requestParserResult) ? requestParserResult : [requestParserResult]
          ) as BatchedParams[];
          // Yoga's own check, for the requests that hold a mutation: queries are left alone.
          if (csrf && params.some(isMutation)) csrf.onRequestParse?.(payload);
          if (Array.isArray(requestParserResult)) batches.set(request, { params });
        },
      };
    },
    onResultProcess({ result, setResult }) {
      // A batch answers with one status and one header set for all its operations: only the
      // body's `extensions.idempotency` can tell which of them were replayed or are resumable.
      if (Array.isArray(result) || isAsyncIterable(result)) return;
      if (isReplayedResult(result))
        setResult(withResponseHeader(result as ExecutionResult, IDEMPOTENT_REPLAYED_HEADER, 'true'));
      else if (isResumableResult(result))
        setResult(withResponseHeader(result as ExecutionResult, IDEMPOTENT_RESUMABLE_HEADER, 'true'));
    },
  };
}

function withResponseHeader(result: ExecutionResult, name: string, value: string): ExecutionResult {
  const http = (result.extensions?.['http'] ?? {}) as { headers?: Record<string, string> };
  return {
    ...result,
    extensions: { ...result.extensions, http: { ...http, headers: { ...http.headers, [name]: value } } },
  };
}

function isMutation(params: BatchedParams): boolean {
  if (typeof params?.query !== 'string') return false;
  try {
    return getOperationAST(parse(params.query), params.operationName ?? undefined)?.operation === 'mutation';
  } catch {
    return false;
  }
}
