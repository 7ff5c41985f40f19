import { getTRPCErrorFromUnknown, TRPCError, type TRPC_ERROR_CODE_KEY } from '@trpc/server';
import { getHTTPStatusCodeFromError } from '@trpc/server/http';
import { TRPC_ERROR_CODES_BY_KEY } from '@trpc/server/rpc';
import type { ErrorCodec, StoredErrorDescription } from '@idem/core';

/**
 * E2/E4: how a failed procedure is stored and replayed. The client sees a tRPC error as its
 * code, message and HTTP status (the default error shape), so exactly those are stored, and a
 * replay rethrows `new TRPCError({ code, message })`: same code, message and status, the
 * plain throws tRPC turned into INTERNAL_SERVER_ERROR included.
 */
export const trpcErrorCodec: ErrorCodec = {
  describe(error) {
    const trpcError = getTRPCErrorFromUnknown(error);
    return {
      name: 'TRPCError',
      message: trpcError.message,
      code: trpcError.code,
      status: getHTTPStatusCodeFromError(trpcError),
    };
  },
  revive(description: StoredErrorDescription) {
    return new TRPCError({
      code: isTRPCErrorCode(description.code) ? description.code : 'INTERNAL_SERVER_ERROR',
      message: description.message,
    });
  },
};

function isTRPCErrorCode(code: string): code is TRPC_ERROR_CODE_KEY {
  return Object.hasOwn(TRPC_ERROR_CODES_BY_KEY, code);
}
