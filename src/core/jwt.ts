/**
 * JWT access token verification (DESIGN.md rule 5): trusted issuers only, each with its own
 * keys, algorithm allowlist, audiences, tenant claim and permissions claim.
 *
 * Order of work for a token, cheapest and least trusting first:
 *   size bound → cache → compact-JWS shape (strict base64url, JSON objects) → header (`alg`,
 *   `b64`, `kid`, `crit`) → unverified `iss` picks the issuer → `alg` on that issuer's
 *   allowlist → key bound to that `alg` → signature → registered claims (`iss`, `aud`,
 *   `exp`, `nbf`) → tokengate's claim rules.
 *
 * Which path production uses: this one. Signatures are checked with node:crypto on prepared
 * KeyObjects (jwt-signature.ts), synchronously; nothing here calls jose. jose's `jwtVerify`
 * on the same bound keys is the reference implementation: test/core/jwt-differential.test.ts
 * shows both accept the same tokens with the same claims, and the JWT test table runs
 * against this verifier. Key fetching and caching are jwks.ts's, unchanged.
 */
import { Buffer } from 'node:buffer'
import { thenMaybe } from '../lib/maybe-async.ts'
import type { AuthFailure } from './failure.ts'
import {
  DEFAULT_ALGORITHMS,
  DEFAULT_PERMISSIONS_CLAIM,
  DEFAULT_TENANT_CLAIM,
  defaultPermissionsFormat,
  type IssuerConfig,
  PERMISSIONS_FORMATS,
} from './issuer.ts'
import {
  createDiscoveredJwks,
  createRemoteJwks,
  DEFAULT_JWKS_OPTIONS,
  type JwksOptions,
  type JwksPool,
  type RemoteJwksDeps,
  type SkippedKey,
} from './jwks.ts'
import { type CachedJwt, createJwtCache } from './jwt-cache.ts'
import { type ClaimRules, checkClaims, checkRegisteredClaims } from './jwt-claims.ts'
import { decodeBase64url, type ParsedJws, parseCompactJws } from './jwt-jws.ts'
import {
  type BoundKey,
  bindIssuerJwk,
  bindPem,
  bindSecret,
  createStaticKeys,
  type IssuerKeys,
  isAsymmetricAlgorithm,
  isHmacAlgorithm,
  isNoneAlgorithm,
  type KeyLookup,
} from './jwt-keys.ts'
import { type JwtRevocationSet, revokedByRule } from './jwt-revocations.ts'
import {
  type Clock,
  type JwtOutcome,
  type JwtVerifier,
  systemClock,
  type VerifiedJwt,
} from './ports.ts'

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
  /**
   * Called for each issuer whose configuration is refused (bad key, algorithm, claim rule).
   * Given, such an issuer is kept as *unusable* instead of failing the whole verifier: its
   * tokens get 503 `unavailable` (its keys are unusable, not the token) and every other
   * issuer verifies. Default: a refused issuer throws here.
   */
  readonly onUnusableIssuer?: (issuer: string, error: Error) => void
  /**
   * Called once per remote key set load that skipped keys it cannot use (bad material, type,
   * or no allowed algorithm), naming each by `kid` and reason, never by material. For one log
   * line per load; the same keys show in `JwksStatus.skippedKeys`.
   */
  readonly onSkippedKeys?: (issuer: string, skipped: readonly SkippedKey[]) => void
  /**
   * Issuers that are trusted but whose key this instance cannot read (a sealed secret without
   * the key that opens it): their tokens get 503 `unavailable`, as a refused issuer's, never a
   * pass and never 401 "not trusted". Default none.
   */
  readonly unreadableIssuers?: readonly string[]
  /**
   * Revocation rules (jwt-revocations.ts), checked after the signature on every token, a
   * cached one included: a matching token gets 401 `invalid_token` (`revoked_by_rule`).
   * Read at each request, so the caller may change the set in place. Default none.
   */
  readonly revocations?: Pick<JwtRevocationSet, 'size' | 'match'>
}

interface TrustedIssuer {
  readonly issuer: string
  readonly audiences: readonly string[]
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

const NO_REVOCATIONS: Pick<JwtRevocationSet, 'size' | 'match'> = {
  size: 0,
  match: () => undefined,
}

type Failed = { ok: false; failure: AuthFailure }
type Verified = { ok: true; entry: CachedJwt } | Failed

const invalid = (
  reason: Extract<AuthFailure, { code: 'invalid_token' }>['reason'],
  detail: string,
): Failed => ({ ok: false, failure: { code: 'invalid_token', reason, detail } })

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
): Required<JwtVerifier> {
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
    onSkippedKeys: options.onSkippedKeys,
  }
  const cache = createJwtCache(nonNegative('cacheMaxEntries', options.cacheMaxEntries ?? 10_000))
  const registry = new Map<string, TrustedIssuer>()
  const unusable = new Set<string>()
  const unreadable = new Set(options.unreadableIssuers ?? [])
  for (const config of issuers) {
    if (registry.has(config.issuer) || unusable.has(config.issuer)) {
      throw new Error(`issuer ${config.issuer} is configured twice`)
    }
    try {
      registry.set(config.issuer, trustIssuer(config, jwks, deps))
    } catch (error) {
      if (options.onUnusableIssuer === undefined || typeof config.issuer !== 'string') throw error
      unusable.add(config.issuer)
      options.onUnusableIssuer(config.issuer, error as Error)
    }
  }

  const revocations = options.revocations ?? NO_REVOCATIONS
  // After the signature: a rule names claims, and unsigned claims prove nothing.
  const unrevoked = (jwt: VerifiedJwt): JwtOutcome => {
    const rule = revocations.match(jwt, settings.clock)
    return rule === undefined ? { ok: true, jwt } : { ok: false, failure: revokedByRule(rule) }
  }

  const verifyMaybeSync = (token: string, sha256Hex?: string): JwtOutcome | Promise<JwtOutcome> => {
    // Bound the work an anonymous caller can cause before any decoding or hashing.
    if (typeof token !== 'string' || token.length === 0 || token.length > settings.maxTokenLength) {
      return { ok: false, failure: malformed('the token is empty or too long') }
    }
    const key = sha256Hex ?? cache.keyOf(token)
    const hit = cache.get(key, settings.clock.now(), settings.toleranceSec)
    if (hit !== undefined) return revocations.size === 0 ? { ok: true, jwt: hit } : unrevoked(hit)
    const checked = checkUnverified(token, registry, unusable, unreadable)
    if (!checked.ok) return checked
    const { jws, trusted, alg, kid } = checked
    // Keys are found by `alg` and `kid` only. The header's `jwk`, `jku`, `x5u` and `x5c`
    // are never read: a key the token brings with it proves nothing about who signed it,
    // and following a URL from it would let any caller make us fetch arbitrary addresses.
    // Static keys answer synchronously; only a remote JWKS costs an await.
    const lookup: KeyLookup | Promise<KeyLookup> = trusted.keys.resolve(
      alg,
      kid,
      signedBeforeMs(jws.payload, settings),
    )
    const withKey = (found: KeyLookup): JwtOutcome => {
      if (!found.ok) return found
      const verified = verifySigned(jws, trusted, found.key, kid, settings)
      if (!verified.ok) return verified
      // A remote key's validity goes with the entry: its withdrawal cuts the cached token.
      cache.set(
        key,
        found.validity === undefined
          ? verified.entry
          : { ...verified.entry, validity: found.validity },
      )
      return unrevoked(verified.entry.jwt)
    }
    return thenMaybe(lookup, withKey)
  }

  return {
    verify: async (token) => verifyMaybeSync(token),
    verifyMaybeSync,
    close() {
      for (const trusted of registry.values()) trusted.keys.close()
      cache.clear()
    },
  }
}

type Unverified =
  | {
      ok: true
      jws: ParsedJws
      trusted: TrustedIssuer
      alg: string
      kid: string | undefined
    }
  | Failed

/** Everything decided before a key is needed: shape, header rules, issuer, allowlist. */
/** What an unusable issuer's tokens get: a fixed issuer arrives through the change feed. */
const UNUSABLE_ISSUER: Failed = {
  ok: false,
  failure: { code: 'unavailable', dependency: 'jwks', retryAfterSeconds: 30 },
}

function checkUnverified(
  token: string,
  registry: ReadonlyMap<string, TrustedIssuer>,
  unusable: ReadonlySet<string>,
  unreadable: ReadonlySet<string>,
): Unverified {
  const parsed = parseCompactJws(token)
  if (!parsed.ok) return invalid('malformed', parsed.detail)
  const { header, payload } = parsed.jws
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
  const crit = checkCrit(header)
  if (crit !== undefined) return { ok: false, failure: crit }
  // The unverified `iss` only chooses whose keys to try; it is checked again once signed.
  const iss = payload.iss
  if (typeof iss !== 'string') return invalid('claims', 'the "iss" claim is missing or invalid')
  const trusted = registry.get(iss)
  if (trusted === undefined) {
    // Why 503 and not 401 for an issuer whose key this instance cannot read: the token may
    // be fine (an instance with the key accepts it), so a 401 would tell the client to drop a
    // good token; a 503 is retried, counted as a server fault, and /readyz names the issuer.
    if (unusable.has(iss) || unreadable.has(iss)) return UNUSABLE_ISSUER
    return invalid('unknown_issuer', 'the token issuer is not trusted')
  }
  if (!trusted.algorithms.has(alg)) {
    return invalid('algorithm_not_allowed', 'the token algorithm is not allowed for its issuer')
  }
  return { ok: true, jws: parsed.jws, trusted, alg, kid }
}

/**
 * RFC 7515 §4.1.11 `crit`: a recipient must refuse a token naming an extension it does not
 * implement, since the issuer declared the token meaningless without it. The only extension
 * understood is `b64` (and only as `true`, see above), as in jose.
 */
function checkCrit(header: Readonly<Record<string, unknown>>): AuthFailure | undefined {
  const crit = header.crit
  if (crit === undefined) return undefined
  if (
    !Array.isArray(crit) ||
    crit.length === 0 ||
    crit.some((name) => typeof name !== 'string' || name === '')
  ) {
    return malformed('the token is not a well-formed JWT')
  }
  for (const name of crit) {
    if (name !== 'b64') return malformed('the token uses an unsupported JOSE feature')
    if (header.b64 === undefined) return malformed('the token is not a well-formed JWT')
  }
  return undefined
}

function verifySigned(
  jws: ParsedJws,
  trusted: TrustedIssuer,
  key: BoundKey,
  kid: string | undefined,
  settings: Settings,
): Verified {
  const signature = decodeBase64url(jws.signature)
  if (signature === undefined) return invalid('malformed', 'the token is not a well-formed JWT')
  // The key checks with exactly the one algorithm it is bound to (jwt-keys.ts).
  if (!key.verify(Buffer.from(jws.signingInput, 'latin1'), signature)) {
    return invalid('bad_signature', 'the signature is not valid')
  }
  const { payload } = jws
  const nowSec = epochSeconds(settings.clock.now())
  const registered = checkRegisteredClaims(
    payload,
    trusted.issuer,
    trusted.audiences,
    nowSec,
    settings.toleranceSec,
  )
  if (registered !== undefined) return { ok: false, failure: registered }
  const checked = checkClaims(payload, trusted.rules, {
    issuer: trusted.issuer,
    keyId: kid ?? key.kid,
    nowSec,
    toleranceSec: settings.toleranceSec,
    maxLifetimeSec: settings.maxLifetimeSec,
  })
  if (!checked.ok) return checked
  const nbf = typeof payload.nbf === 'number' ? payload.nbf : undefined
  const iat = typeof payload.iat === 'number' ? payload.iat : undefined
  const entry: CachedJwt = {
    jwt: checked.jwt,
    expSec: payload.exp as number,
    notBeforeSec: nbf === undefined ? iat : iat === undefined ? nbf : Math.max(nbf, iat),
  }
  return { ok: true, entry }
}

/**
 * An instant (epoch ms, our clock) the token was certainly signed before: now, since it has
 * arrived, or earlier when its unverified `iat` says so. `iat` is whole seconds (floored) of
 * the issuer's clock, which may differ from ours by up to the clock tolerance, so the token
 * was signed before `iat + 1 s + tolerance` by our clock.
 *
 * Why an unverified `iat` is good enough here: the value only helps a remote JWKS decide
 * whether an unknown `kid` during its refetch cooldown is answered 401 (our keys are newer
 * than the token) or 503 (the key may have been published after our last fetch; jwks.ts).
 * A forger who moves `iat` forward gets a 503 instead of a 401 and no extra JWKS request;
 * one who moves it back gets the 401 the token deserves anyway.
 */
function signedBeforeMs(payload: Readonly<Record<string, unknown>>, settings: Settings): number {
  const nowMs = settings.clock.now()
  const iat = payload.iat
  if (typeof iat !== 'number' || !Number.isFinite(iat)) return nowMs
  return Math.min(nowMs, (iat + 1 + settings.toleranceSec) * 1000)
}

function malformed(detail: string): AuthFailure {
  return { code: 'invalid_token', reason: 'malformed', detail }
}

/**
 * Checks one issuer configuration exactly as `createJwtVerifier` will (algorithms, key
 * binding of inline/PEM/secret keys, JWKS and discovery URLs), without fetching anything.
 * Throws the error a server start would; the CLI and admin API call it before storing.
 */
export function checkIssuerConfig(config: IssuerConfig): void {
  const offline: RemoteJwksDeps = {
    clock: systemClock,
    fetch: () => Promise.reject(new Error('no fetch while checking a configuration')),
  }
  trustIssuer(config, DEFAULT_JWKS_OPTIONS, offline).keys.close()
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
  const permissionsFormat = config.permissionsFormat ?? defaultPermissionsFormat(permissionsClaim)
  if (!PERMISSIONS_FORMATS.includes(permissionsFormat)) {
    fail('"permissionsFormat" must be "array" or "space-delimited"')
  }
  return Object.freeze({
    issuer: config.issuer,
    audiences: [...audiences],
    algorithms: new Set(algorithms),
    keys,
    rules: { tenant, permissionsClaim, permissionsFormat },
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
      return createRemoteJwks(source.url, jwks, deps, { issuer: config.issuer, algorithms })
    case 'oidc_discovery':
      return createDiscoveredJwks(
        { issuer: config.issuer, algorithms },
        jwks,
        deps,
        source.jwksOrigins,
      )
    case 'jwks': {
      // Inline keys are the operator's own file: a key that cannot be used (no allowed
      // algorithm fits it, broken material) refuses the issuer, where a remote set skips it.
      const keys = source.jwks.keys.flatMap((jwk, index) => {
        try {
          return bindIssuerJwk(jwk, algorithms)
        } catch (error) {
          const kid = typeof jwk?.kid === 'string' ? ` (kid ${jwk.kid})` : ''
          throw new Error(`JWKS key ${index}${kid}: ${(error as Error).message}`)
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
