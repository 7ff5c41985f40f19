/**
 * Credentials that are not `Bearer <account>` (Basic, a bare token, `Bearer` alone…). Answered
 * 401: a caller whose credentials are wrong must never get the anonymous account's stored
 * responses (S1).
 */
export class BadCredentialsError extends Error {
  constructor() {
    super('Authorization must be "Bearer <account>"; send no Authorization header to act as the public account.');
    this.name = 'BadCredentialsError';
  }
}

/**
 * The account a request acts for (S1): `Authorization: Bearer <account>`, or `public` when no
 * Authorization header is sent.
 * @throws BadCredentialsError for any other Authorization header.
 */
export function accountOf(authorization: string | null | undefined): string {
  if (authorization === undefined || authorization === null) return 'public';
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  if (!match) throw new BadCredentialsError();
  return match[1]!;
}

/**
 * Accounts many callers share: the anonymous `public` (no Authorization) and idem's `*`
 * (`sharedPrincipal`). Their keys cannot be looked up (403, `SharedPrincipalLookupError`): any
 * anonymous caller could otherwise read another's payment by its key alone.
 */
export const SHARED_ACCOUNTS: readonly string[] = ['*', 'public'];
