/**
 * `tokengate` as a library. `createTokengate` opens the store and wires the gate as the
 * server does (docs/library.md); the framework-free auth core and its wire format below are
 * for users who bring their own PAT and tenant lookups (`createGate({ authenticate })`).
 *
 * @example
 * import { createAuthenticator, authorize, failureResponse, readAuthHeaders } from 'tokengate'
 * const authenticate = createAuthenticator({ lookups: store, jwt: verifier, clock: systemClock })
 * const result = await authenticate(readAuthHeaders(req.rawHeaders))
 * const failure = result.ok ? authorize(result.principal, ['tokens:read']) : result.failure
 * if (failure) { const { status, headers, body } = failureResponse(failure, requestId); ... }
 */

// First: an old Node is refused in one line before anything else loads.
import './node-version.ts'

export {
  type Access,
  type Allowed,
  createGate,
  type Gate,
  type GateDeps,
  type GateRequest,
  type GateSource,
  type Outcome,
  type Refused,
} from './auth/gate.ts'
export type { QuotaSpec } from './auth/key-fields.ts'
export type { Answer, DecisionFacts, OutcomeRecorder } from './auth/outcome-recorder.ts'
export type {
  IssuePatRequest,
  PatEdit,
  PatEdited,
  PatLifetime,
  RotatePatRequest,
} from './auth/pat-lifecycle.ts'
export {
  createTokengate,
  type PatOperations,
  type Tokengate,
  type TokengateOptions,
} from './auth/tokengate.ts'
export {
  type Authenticate,
  type AuthenticateMaybeSync,
  type AuthenticatorDeps,
  createAuthenticator,
  createMaybeSyncAuthenticator,
  isPromiseLike,
  STORE_RETRY_AFTER_SECONDS,
} from './core/authenticate.ts'
export { authorize } from './core/authorize.ts'
export type {
  Authenticator,
  CredentialContext,
  CredentialKind,
  CredentialRequest,
  KindDeps,
  PeerCertificate,
} from './core/credential-kind.ts'
export {
  credentialKinds,
  registerCredentialKind,
  unregisterCredentialKind,
} from './core/credential-kinds.ts'
export {
  MAX_TOKEN_LENGTH,
  type ParsedAuthorization,
  parseAuthorization,
} from './core/credentials.ts'
export type {
  AuthFailure,
  FailureCode,
  InvalidTokenReason,
  QuotaState,
} from './core/failure.ts'
export { fingerprintToken } from './core/fingerprint.ts'
export type { IssuerConfig, KeySource } from './core/issuer.ts'
export { createJwtVerifier, type JwtVerifierOptions } from './core/jwt.ts'
export { secretKeySource } from './core/jwt-keys.ts'
export {
  checkPatFormat,
  generatePat,
  hashPat,
  type IssuePatInput,
  isPatToken,
  issuePat,
  PAT_LENGTH,
  PAT_PATTERN,
  PAT_PREFIX,
  type PatFormatCheck,
  patLast4,
} from './core/pat.ts'
export { holdsAll, missingPermissions } from './core/permissions.ts'
export {
  type AuthLookups,
  type Clock,
  type JwtOutcome,
  type JwtVerifier,
  type KeyLimits,
  type PatRecord,
  type Quota,
  type RateLimitOverride,
  systemClock,
  type Tenant,
  type VerifiedJwt,
} from './core/ports.ts'
export type { AuthResult, Principal, TokenType } from './core/principal.ts'
export {
  type AuthInput,
  authInputFromHeaders,
  type HeaderGetter,
  headerValues,
  readAuthHeaders,
} from './core/raw-headers.ts'
export * from './http/index.ts'
export type { Store } from './stores/store.ts'
