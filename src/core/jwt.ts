/**
 * JWT access token verification (DESIGN.md rule 5): trusted issuers only, each with its own
 * keys, algorithm allowlist, audiences, tenant claim and permissions claim.
 *
 * Order of work for a token, cheapest and least trusting first:
 *   size bound → cache → compact-JWS shape → header (`alg`, `b64`, `kid`) → unverified `iss`
 *   picks the issuer → `alg` on that issuer's allowlist → key bound to that `alg` → jose
 *   verifies signature, `iss`, `aud`, `exp`, `nbf` → tokengate's claim rules.
 */
import { decodeJwt, decodeProtectedHeader, errors, jwtVerify } from 'jose'
import type { AuthFailure } from './failure.ts'
import {
  DEFAULT_ALGORITHMS,
  DEFAULT_PERMISSIONS_CLAIM,
  DEFAULT_TENANT_CLAIM,
  type IssuerConfig,
} from './issuer.ts'
import {
  createDiscoveredJwks,
  createRemoteJwks,
  DEFAULT_JWKS_OPTIONS,
  type JwksOptions,
  type JwksPool,
  type RemoteJwksDeps,
} from './jwks.ts'
import { type CachedJwt, createJwtCache } from './jwt-cache.ts'
import { type ClaimRules, checkClaims } from './jwt-claims.ts'
import {
  type BoundKey,
  bindJwk,
  bindPem,
  bindSecret,
  createStaticKeys,
  type IssuerKeys,
  isAsymmetricAlgorithm,
  isHmacAlgorithm,
  isNoneAlgorithm,
} from './jwt-keys.ts'
import { type Clock, type JwtVerifier, systemClock } from './ports.ts'

/** Options of {@link createJwtVerifier}; every field has a default. */
export interface JwtVerifierOptions {
  /** Source of the current time for every time check and cache age. Default `systemClock`. */
  readonly clock?: Clock
  /** Allowed clock skew for `exp`, `nbf` and `iat`, in seconds. Default 30. */
  readonly clockToleranceSec?: number
  /**
   * Maximum token lifetime in seconds: `exp - iat`, or `exp - now` without `iat`.
   * Default 86400 (24 h).
   */
  readonly maxLifetimeSec?: number
  /** Longer tokens are refused before any parsing, in characters. Default 8192. */
  readonly maxTokenLength?: number
  /** Verified tokens kept in the cache; 0 disables it. Default 10000. */
  readonly cacheMaxEntries?: number
  /** Remote JWKS timings; see {@link JwksOptions} for the defaults. */
  readonly jwks?: Partial<JwksOptions>
  /** `fetch` used for remote JWKS. Default the global `fetch`. */
  readonly fetch?: typeof globalThis.fetch
  /** Remote key sources shared across verifiers (`createJwksPool`). Default: none shared. */
  readonly jwksPool?: JwksPool
}

interface TrustedIssuer {
  readonly issuer: string
  /** Mutable only because jose's option type is; never changed. */
  readonly audiences: string[]
  readonly algorithms: ReadonlySet<string>
  readonly keys: IssuerKeys
  readonly rules: ClaimRules
}

interface Settings {
  readonly clock: Clock
  readonly toleranceSec: number
  readonly maxLifetimeSec: number
  readonly maxTokenLength: number
}

type Verified = { ok: true; entry: CachedJwt } | { ok: false; failure: AuthFailure }

const invalid = (
  reason: Extract<AuthFailure, { code: 'invalid_token' }>['reason'],
  detail: string,
): Verified => ({ ok: false, failure: { code: 'invalid_token', reason, detail } })

/**
 * Creates the JWT verifier for a set of trusted issuers. Validates every issuer and imports
 * every static key up front: a configuration error throws here, never on a request.
 *
 * @example
 * const jwt = createJwtVerifier(issuers, { clockToleranceSec: 30 })
 * const outcome = await jwt.verify(token) // { ok: true, jwt } or { ok: false, failure }
 */
export function createJwtVerifier(
  issuers: readonly IssuerConfig[],
  options: JwtVerifierOptions = {},
): JwtVerifier {
  const settings: Settings = {
    clock: options.clock ?? systemClock,
    toleranceSec: nonNegative('clockToleranceSec', options.clockToleranceSec ?? 30),
    maxLifetimeSec: nonNegative('maxLifetimeSec', options.maxLifetimeSec ?? 86_400),
    maxTokenLength: nonNegative('maxTokenLength', options.maxTokenLength ?? 8192),
  }
  const jwks: JwksOptions = { ...DEFAULT_JWKS_OPTIONS }
  for (const [name, value] of Object.entries(options.jwks ?? {})) {
    if (value !== undefined) Object.assign(jwks, { [name]: value })
  }
  for (const [name, value] of Object.entries(jwks)) nonNegative(`jwks.${name}`, value)
  const deps: RemoteJwksDeps = {
    clock: settings.clock,
    fetch: options.fetch ?? ((input, init) => globalThis.fetch(input, init)),
    pool: options.jwksPool,
  }
  const cache = createJwtCache(nonNegative('cacheMaxEntries', options.cacheMaxEntries ?? 10_000))
  const registry = new Map<string, TrustedIssuer>()
  for (const config of issuers) {
    if (registry.has(config.issuer)) throw new Error(`issuer ${config.issuer} is configured twice`)
    registry.set(config.issuer, trustIssuer(config, jwks, deps))
  }

  return {
    async verify(token) {
      // Bound the work an anonymous caller can cause before any decoding or hashing.
      if (
        typeof token !== 'string' ||
        token.length === 0 ||
        token.length > settings.maxTokenLength
      ) {
        return { ok: false, failure: malformed('the token is empty or too long') }
      }
      const key = cache.keyOf(token)
      const hit = cache.get(key, epochSeconds(settings.clock.now()), settings.toleranceSec)
      if (hit !== undefined) return { ok: true, jwt: hit }
      const verified = await verifyUncached(token, registry, settings)
      if (!verified.ok) return verified
      cache.set(key, verified.entry)
      return { ok: true, jwt: verified.entry.jwt }
    },
    close() {
      for (const trusted of registry.values()) trusted.keys.close()
      cache.clear()
    },
  } satisfies JwtVerifier
}

async function verifyUncached(
  token: string,
  registry: ReadonlyMap<string, TrustedIssuer>,
  settings: Settings,
): Promise<Verified> {
  // Only compact JWS: a JWE (5 segments) or a JSON serialization is not an access token.
  const segments = token.split('.').length
  if (segments === 5) return invalid('malformed', 'encrypted tokens (JWE) are not accepted')
  if (segments !== 3) return invalid('malformed', 'the token is not a compact JWS')
  let header: Record<string, unknown>
  let unverified: Record<string, unknown>
  try {
    header = decodeProtectedHeader(token) as Record<string, unknown>
    unverified = decodeJwt(token)
  } catch {
    return invalid('malformed', 'the token is not a well-formed JWT')
  }
  const { alg, kid } = header
  if (typeof alg !== 'string' || alg === '') return invalid('malformed', 'the token has no "alg"')
  // `alg: none` means "no signature": anyone could write any claims. Refused in every
  // spelling, whatever an issuer's configuration says, before anything else is looked at.
  if (isNoneAlgorithm(alg)) {
    return invalid('algorithm_not_allowed', 'unsigned tokens are not accepted')
  }
  // RFC 7797 unencoded payloads are not JWTs (RFC 7519 requires base64url); refusing them
  // here keeps the signed bytes and the parsed claims the same bytes.
  if (header.b64 !== undefined && header.b64 !== true) {
    return invalid('malformed', 'unencoded payloads are not accepted')
  }
  if (kid !== undefined && typeof kid !== 'string') {
    return invalid('malformed', 'the "kid" must be a string')
  }
  // The unverified `iss` only chooses whose keys to try; jose then checks it again, signed.
  const iss = unverified.iss
  if (typeof iss !== 'string') return invalid('claims', 'the "iss" claim is missing or invalid')
  const trusted = registry.get(iss)
  if (trusted === undefined) return invalid('unknown_issuer', 'the token issuer is not trusted')
  if (!trusted.algorithms.has(alg)) {
    return invalid('algorithm_not_allowed', 'the token algorithm is not allowed for its issuer')
  }
  // Keys are found by `alg` and `kid` only. The header's `jwk`, `jku`, `x5u` and `x5c` are
  // never read: a key the token brings with it proves nothing about who signed it, and
  // following a URL from it would let any caller make us fetch arbitrary addresses.
  const lookup = await trusted.keys.resolve(alg, kid)
  if (!lookup.ok) return lookup
  return verifySigned(token, trusted, lookup.key, kid, settings)
}

async function verifySigned(
  token: string,
  trusted: TrustedIssuer,
  key: BoundKey,
  kid: string | undefined,
  settings: Settings,
): Promise<Verified> {
  const nowMs = settings.clock.now()
  let payload: Record<string, unknown>
  try {
    // A CryptoKey (never a resolver function) and exactly one algorithm: the one this key
    // is bound to. jose also refuses unknown `crit` parameters.
    const result = await jwtVerify(token, key.key, {
      algorithms: [key.alg],
      issuer: trusted.issuer,
      audience: trusted.audiences,
      requiredClaims: ['exp'],
      clockTolerance: settings.toleranceSec,
      currentDate: new Date(nowMs),
    })
    payload = result.payload as Record<string, unknown>
  } catch (error) {
    return { ok: false, failure: translateJoseError(error) }
  }
  const nowSec = epochSeconds(nowMs)
  const checked = checkClaims(payload, trusted.rules, {
    issuer: trusted.issuer,
    keyId: kid ?? key.kid,
    nowSec,
    toleranceSec: settings.toleranceSec,
    maxLifetimeSec: settings.maxLifetimeSec,
  })
  if (!checked.ok) return checked
  const times = [payload.nbf, payload.iat].filter((t): t is number => typeof t === 'number')
  const entry: CachedJwt = {
    jwt: checked.jwt,
    expSec: payload.exp as number,
    notBeforeSec: times.length === 0 ? undefined : Math.max(...times),
  }
  return { ok: true, entry }
}

/** Names jose reports in claim failures; anything else is described generically. */
const REGISTERED_CLAIMS = new Set(['iss', 'aud', 'exp', 'nbf', 'iat', 'sub'])

/**
 * Translates a jose error where it enters (STYLE §6). Messages are ours, fixed and
 * client-safe; jose's messages and the token never reach a client. Anything that is not a
 * jose error is a bug and is rethrown.
 */
export function translateJoseError(error: unknown): AuthFailure {
  if (!(error instanceof errors.JOSEError)) throw error
  if (error instanceof errors.JWTExpired) {
    return { code: 'token_expired', detail: 'the token has expired' }
  }
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.claim === 'nbf' && error.reason === 'check_failed') {
      return {
        code: 'invalid_token',
        reason: 'not_yet_valid',
        detail: 'the token is not valid yet',
      }
    }
    const name = REGISTERED_CLAIMS.has(error.claim) ? `the "${error.claim}" claim` : 'a claim'
    return { code: 'invalid_token', reason: 'claims', detail: `${name} is missing or invalid` }
  }
  if (error instanceof errors.JWSSignatureVerificationFailed) {
    return { code: 'invalid_token', reason: 'bad_signature', detail: 'the signature is not valid' }
  }
  if (error instanceof errors.JOSEAlgNotAllowed) {
    return {
      code: 'invalid_token',
      reason: 'algorithm_not_allowed',
      detail: 'the token algorithm is not allowed',
    }
  }
  if (error instanceof errors.JOSENotSupported) {
    return malformed('the token uses an unsupported JOSE feature')
  }
  return malformed('the token is not a well-formed JWT')
}

function malformed(detail: string): AuthFailure {
  return { code: 'invalid_token', reason: 'malformed', detail }
}

/** Validates one issuer and builds its key source. Throws on any configuration error. */
function trustIssuer(config: IssuerConfig, jwks: JwksOptions, deps: RemoteJwksDeps): TrustedIssuer {
  const fail = (message: string): never => {
    throw new Error(`issuer ${JSON.stringify(config.issuer)}: ${message}`)
  }
  if (typeof config.issuer !== 'string' || config.issuer === '') {
    fail('"issuer" must be a non-empty string')
  }
  const audiences = config.audiences ?? []
  if (audiences.length === 0 || audiences.some((a) => typeof a !== 'string' || a === '')) {
    fail('"audiences" must list at least one non-empty string')
  }
  const source = config.keySource
  const algorithms =
    config.algorithms ?? (source.kind === 'secret' ? [source.algorithm] : DEFAULT_ALGORITHMS)
  if (algorithms.length === 0) fail('"algorithms" must not be empty')
  for (const alg of algorithms) {
    if (isNoneAlgorithm(alg)) fail('"none" can never be allowed')
    // HMAC only with an explicit secret: otherwise the "secret" would be a public key that
    // anyone can download, and any caller could sign tokens with it.
    if (isHmacAlgorithm(alg) && source.kind !== 'secret') fail(`${alg} needs a "secret" key source`)
    if (!isHmacAlgorithm(alg) && source.kind === 'secret') fail(`a secret cannot verify ${alg}`)
    if (!isHmacAlgorithm(alg) && !isAsymmetricAlgorithm(alg)) fail(`unsupported algorithm ${alg}`)
  }
  let keys: IssuerKeys
  try {
    keys = buildKeys(config, algorithms, jwks, deps)
  } catch (error) {
    return fail((error as Error).message)
  }
  const tenant = config.tenant ?? { claim: DEFAULT_TENANT_CLAIM }
  const tenantName = 'fixed' in tenant ? tenant.fixed : tenant.claim
  if (typeof tenantName !== 'string' || tenantName === '') {
    fail('the tenant claim or fixed tenant must be non-empty')
  }
  const permissionsClaim = config.permissionsClaim ?? DEFAULT_PERMISSIONS_CLAIM
  if (permissionsClaim === '') fail('"permissionsClaim" must be non-empty')
  return Object.freeze({
    issuer: config.issuer,
    audiences: [...audiences],
    algorithms: new Set(algorithms),
    keys,
    rules: { tenant, permissionsClaim },
  })
}

function buildKeys(
  config: IssuerConfig,
  algorithms: readonly string[],
  jwks: JwksOptions,
  deps: RemoteJwksDeps,
): IssuerKeys {
  const source = config.keySource
  switch (source.kind) {
    case 'jwks_url':
      return createRemoteJwks(source.url, jwks, deps, config.issuer)
    case 'oidc_discovery':
      return createDiscoveredJwks(config.issuer, jwks, deps)
    case 'jwks': {
      const keys = source.jwks.keys.map((jwk, index) => {
        try {
          return bindJwk(jwk)
        } catch (error) {
          throw new Error(`JWKS key ${index}: ${(error as Error).message}`)
        }
      })
      if (keys.length === 0) throw new Error('the JWKS has no keys')
      const seen = new Set<string>()
      for (const key of keys) {
        const id = `${key.kid ?? ''}\u0000${key.alg}`
        if (seen.has(id)) {
          throw new Error(`two JWKS keys share kid ${key.kid ?? '(none)'} and ${key.alg}`)
        }
        seen.add(id)
      }
      return createStaticKeys(keys, false)
    }
    case 'pem':
      if (!algorithms.includes(source.algorithm)) {
        throw new Error(`${source.algorithm} is not in "algorithms"`)
      }
      return createStaticKeys(
        [bindPem(source.pem, source.algorithm, source.kid)],
        source.kid === undefined,
      )
    case 'secret':
      if (!algorithms.includes(source.algorithm)) {
        throw new Error(`${source.algorithm} is not in "algorithms"`)
      }
      return createStaticKeys([bindSecret(source.secret, source.algorithm)], true)
    default:
      return source satisfies never
  }
}

function nonNegative(name: string, value: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new RangeError(`${name} must be a non-negative number`)
  }
  return value
}

/** Whole seconds since the epoch, as jose computes "now". */
function epochSeconds(ms: number): number {
  return Math.floor(ms / 1000)
}
