/** The account a request acts for (S1): `Authorization: Bearer <account>`, else `public`. */
export function accountOf(authorization: string | null | undefined): string {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  return match ? match[1]! : 'public';
}
