import type { Authenticator, KindDeps } from './credential-kind.ts'
import { credentialKinds } from './credential-kinds.ts'
import { parseAuthorization } from './credentials.ts'
import type { AuthResult } from './principal.ts'
import type { AuthInput, TokenDigest } from './raw-headers.ts'

export type {
  Authenticator,
  CredentialContext,
  CredentialKind,
  CredentialRequest,
  KindDeps,
  PeerCertificate,
} from './credential-kind.ts'
export {
  credentialKindNamed,
  credentialKinds,
  registerCredentialKind,
  unregisterCredentialKind,
} from './credential-kinds.ts'
export { STORE_RETRY_AFTER_SECONDS, sameTenantId } from './tenant-rules.ts'

/** Authenticates one request's headers: a `Principal`, or the first failing rule. */
export type Authenticate = (input: AuthInput) => Promise<AuthResult>

/**
 * `Authenticate` that answers without a promise when nothing had to wait: a rejection
 * decided from the header alone, or a PAT and its tenant found in a synchronous (cached)
 * lookup. Callers must accept both a value and a promise. `digest`: the bearer token's
 * SHA-256 read up front (the gate's), as `AuthInput.tokenSha256` but without a copy of the
 * request to carry it; a function that ignores it hashes the token itself.
 */
export type AuthenticateMaybeSync = (
  input: AuthInput,
  digest?: TokenDigest,
) => AuthResult | Promise<AuthResult>

export type AuthenticatorDeps = KindDeps

/**
 * Builds the authentication pipeline (DESIGN "Authentication, precisely" rules 1–6):
 *
 * 1. `parseAuthorization`: missing or malformed header;
 * 2. the first registered credential kind that claims the request decides (`pat_` → PAT,
 *    any other bearer token → JWT, or a registered kind's own credential; `credential-kind.ts`);
 * 3. PAT: format and checksum (no store access) → lookup by hash → revoked → expired →
 *    tenant exists and is enabled → optional `X-Tenant-Id` equals the PAT's tenant;
 * 4. JWT: verify → `X-Tenant-Id` required and equal to the tenant claim → tenant exists and
 *    is enabled;
 * 5. the `Principal`.
 *
 * Permissions are checked afterwards with `authorize`, so every 401 is decided before a 403.
 * The returned function never rejects for a bad request: a store that throws becomes
 * `unavailable` (503, fail closed). It rejects only if `jwt.verify` breaks its own contract.
 *
 * @example
 * const authenticate = createAuthenticator({ lookups: store, jwt: verifier, clock: systemClock })
 * const result = await authenticate(readAuthHeaders(req.rawHeaders))
 */
export function createAuthenticator(deps: AuthenticatorDeps): Authenticate {
  const authenticate = createMaybeSyncAuthenticator(deps)
  // The same pipeline, reachable by `maybeSyncOf`, so the gate need not wrap it in a promise.
  return Object.assign(async (input: AuthInput) => authenticate(input), {
    [MAYBE_SYNC]: authenticate,
  })
}

const MAYBE_SYNC = Symbol('tokengate.maybeSyncAuthenticate')

/**
 * The maybe-synchronous pipeline behind an `Authenticate` made by `createAuthenticator`, or
 * the function itself. Why: the gate accepts either kind, and calling the pipeline directly
 * spares an application using the public factory a promise and a microtask turn per
 * request; a wrapped or hand-written function is called as given.
 */
export function maybeSyncOf(authenticate: AuthenticateMaybeSync): AuthenticateMaybeSync {
  return (authenticate as { [MAYBE_SYNC]?: AuthenticateMaybeSync })[MAYBE_SYNC] ?? authenticate
}

/**
 * The same pipeline as `createAuthenticator`, returning a value instead of a promise when
 * no step had to wait (see `AuthenticateMaybeSync`). The rules and their order are those of
 * the asynchronous form.
 *
 * @example
 * const result = authenticate(input)
 * const settled = isPromiseLike(result) ? await result : result
 */
export function createMaybeSyncAuthenticator(deps: AuthenticatorDeps): AuthenticateMaybeSync {
  return authenticateWith(credentialKinds().map((kind) => kind.create(deps)))
}

/**
 * Parses the `Authorization` header, then hands the request to the first kind that claims
 * it; when none does, the header's own verdict (missing or malformed, SPEC §5.3) stands.
 * A refusal names the kind that claimed the request (`kind`), for its fingerprint and label.
 */
export function authenticateWith(kinds: readonly Authenticator[]): AuthenticateMaybeSync {
  return function authenticate(
    input: AuthInput,
    digest?: TokenDigest,
  ): AuthResult | Promise<AuthResult> {
    const parsed = parseAuthorization(input.authorization)
    const bearer = parsed.ok ? parsed.token : undefined
    for (const kind of kinds) {
      const credential = kind.claim(input, bearer)
      if (credential === undefined) continue
      const hint = digest ?? input.tokenSha256
      const context = {
        tenantIds: input.tenantIds,
        sha256Hex: hint !== undefined && hint.token === credential ? hint.sha256Hex : undefined,
        request: input,
      }
      const result = kind.authenticate(credential, context)
      if (isPromiseLike(result)) return namedLater(result, kind, credential)
      return named(result, kind, credential)
    }
    if (!parsed.ok) return parsed
    return {
      ok: false,
      failure: { code: 'invalid_token', reason: 'malformed', detail: 'Unknown credential kind.' },
    }
  }
}

// Not a closure in the loop above: V8 would allocate a context for `kind` and `credential`
// per kind tried on every request, waiting or not.
function namedLater(
  pending: PromiseLike<AuthResult>,
  kind: Authenticator,
  credential: string,
): Promise<AuthResult> {
  return Promise.resolve(pending).then((result) => named(result, kind, credential))
}

function named(result: AuthResult, kind: Authenticator, credential: string): AuthResult {
  return result.ok ? result : { ...result, claimed: { kind: kind.kind, credential } }
}

import { isPromiseLike } from '../lib/maybe-async.ts'

export { isPromiseLike }
