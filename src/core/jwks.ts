/**
 * Remote key sources: a JSON Web Key Set at a URL, or found through OpenID Connect discovery
 * from the issuer URL alone. Keys are fetched on first use (or by `warm`), cached for
 * `cacheMaxAgeMs`, refetched at most once per `cooldownMs` (on expiry or on an unknown
 * `kid`), and kept for `staleWhileErrorMs` more while the source is down. An unknown `kid`
 * during the cooldown is 401 only when the keys held are newer than the token, else 503
 * (see `resolve` below): key rotation never causes a false 401. A `kid` an earlier read
 * published and a later one dropped is withdrawn: its tokens are 401 at once, cached or not
 * (see `KeyValidity`).
 *
 * Fail closed, but honestly: when no usable keys can be had, the answer is an `unavailable`
 * failure (503 with `Retry-After`), never a pass and never `invalid_token` (the token may be
 * fine; we cannot tell). The one exception is a token naming a key the issuer does publish
 * but that we cannot use (see `SkippedKey`): that is a stable 401, as no retry can help.
 * Nothing here throws on a request.
 */
import { Buffer } from 'node:buffer'
import type { AuthFailure } from './failure.ts'
import {
  type BoundKey,
  bindIssuerJwk,
  type IssuerKeys,
  type JwkRefusalReason,
  JwkRefused,
  type KeyLookup,
  type KeyValidity,
  selectionFailure,
  selectKey,
} from './jwt-keys.ts'
import type { Clock } from './ports.ts'

/** Remote JWKS timings, all in milliseconds. */
export interface JwksOptions {
  /** Abort a JWKS (or discovery) request after this long. Default 5000. */
  readonly timeoutMs: number
  /** Minimum time between two refreshes of the same key source. Default 30000. */
  readonly cooldownMs: number
  /** Refetch keys older than this (on the next token that needs them). Default 600000. */
  readonly cacheMaxAgeMs: number
  /** Keep using keys this long past `cacheMaxAgeMs` while refetching fails. Default 3600000. */
  readonly staleWhileErrorMs: number
}

export const DEFAULT_JWKS_OPTIONS: JwksOptions = Object.freeze({
  timeoutMs: 5000,
  cooldownMs: 30_000,
  cacheMaxAgeMs: 600_000,
  staleWhileErrorMs: 3_600_000,
})

/** A JWKS or discovery document larger than this is refused: both are a few kilobytes. */
const MAX_DOCUMENT_BYTES = 256 * 1024

/** OpenID Connect Discovery 1.0 §4: appended to the issuer URL (without a trailing slash). */
export const DISCOVERY_PATH = '/.well-known/openid-configuration'

export interface RemoteJwksDeps {
  readonly clock: Clock
  readonly fetch: typeof globalThis.fetch
  /**
   * Called once per key set load that passed over keys it cannot use, with every such key
   * (never their material): the caller logs one line. Not called per token.
   */
  readonly onSkippedKeys?: ((issuer: string, skipped: readonly SkippedKey[]) => void) | undefined
  /**
   * Keeps key sources alive across verifier generations (see {@link createJwksPool}).
   * Without one, every verifier owns its key sources and closes them.
   */
  readonly pool?: JwksPool | undefined
}

/**
 * A key the issuer's JWKS publishes for signatures that tokengate cannot use: its material
 * is broken, its type unsupported, or none of its algorithms is on the issuer's allow-list.
 * Keys marked for encryption (`use: enc`) are not signing keys and are not listed.
 */
export interface SkippedKey {
  /** The key's `kid` (at most 128 characters), or null when it has none. */
  readonly kid: string | null
  readonly reason: Exclude<JwkRefusalReason, 'not_for_signing'>
  /** A fixed, config-safe sentence; never key material. */
  readonly detail: string
}

/** Which of an issuer's algorithms its key source binds keys for, and whose keys they are. */
export interface KeySourceOwner {
  /** The issuer's `iss`, for status and logs. */
  readonly issuer: string
  /** The issuer's algorithm allow-list: keys without `alg` are bound under it. */
  readonly algorithms: readonly string[]
}

/**
 * Where a remote key source stands, for readiness reports and logs:
 * - `fresh`: keys fetched less than `cacheMaxAgeMs` ago;
 * - `stale`: older, but within `staleWhileErrorMs` (still verifying; a refresh is due or failing);
 * - `unavailable`: no usable keys (never loaded, or past staleness): tokens of this issuer
 *   get 503 until a fetch succeeds.
 */
export interface JwksStatus {
  readonly issuer: string
  readonly state: 'fresh' | 'stale' | 'unavailable'
  /** Epoch ms of the last successful fetch, or null if none succeeded. */
  readonly loadedAt: number | null
  /** Epoch ms of the last failed fetch after the last success, or null. */
  readonly failingSince: number | null
  /** Keys the last JWKS read published but that cannot be used; their tokens get 401. */
  readonly skippedKeys: readonly SkippedKey[]
}

/** A remote key source: {@link IssuerKeys} plus what readiness needs. */
export interface RemoteJwks extends IssuerKeys {
  readonly issuer: string
  status(): JwksStatus
  /**
   * Refreshes in the background when keys are missing or past `cacheMaxAgeMs` and no cooldown
   * applies; otherwise does nothing. Resolves when that refresh ends. Never rejects.
   */
  warm(): Promise<void>
}

/**
 * Checks a JWKS or issuer URL: `https:`, or `http:` on a loopback host only.
 *
 * Why: keys fetched over plain HTTP can be replaced by anyone on the path, and whoever
 * supplies the keys can mint any token. Loopback is allowed for local identity providers
 * and tests.
 */
export function checkJwksUrl(url: string): URL {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw new Error('JWKS URL is not a valid URL')
  }
  const loopback = ['127.0.0.1', '[::1]', 'localhost'].includes(parsed.hostname)
  if (parsed.protocol !== 'https:' && !(parsed.protocol === 'http:' && loopback)) {
    throw new Error('JWKS URL must use https (http is allowed on loopback only)')
  }
  if (parsed.username || parsed.password) {
    throw new Error('JWKS URL must not carry credentials')
  }
  return parsed
}

/**
 * The discovery document URL of an issuer (OpenID Connect Discovery 1.0 §4): the issuer
 * with `/.well-known/openid-configuration` appended. Throws when the issuer is not an https
 * URL (http on loopback only), has a query or fragment, or carries credentials.
 */
export function discoveryUrl(issuer: string, documentPath: string = DISCOVERY_PATH): URL {
  let parsed: URL
  try {
    parsed = new URL(issuer)
  } catch {
    throw new Error('discovery needs an issuer that is a URL')
  }
  if (parsed.search !== '' || parsed.hash !== '' || parsed.username || parsed.password) {
    throw new Error('a discovery issuer URL has no query, fragment or credentials')
  }
  try {
    checkJwksUrl(issuer)
  } catch {
    throw new Error('a discovery issuer must use https (http is allowed on loopback only)')
  }
  return new URL(`${issuer.replace(/\/$/, '')}${documentPath}`)
}

/** Creates the key source of one issuer whose keys live at `url`. */
export function createRemoteJwks(
  url: string,
  options: JwksOptions,
  deps: RemoteJwksDeps,
  owner: KeySourceOwner,
): IssuerKeys {
  const target = checkJwksUrl(url)
  return pooled(deps, poolKey(owner, 'jwks_url', target.href), () =>
    createKeySource(owner, async () => target, options, deps),
  )
}

/**
 * Creates the key source of an issuer known only by its URL: each refresh reads
 * `<issuer>/.well-known/openid-configuration`, checks that its `issuer` is exactly the
 * configured one, and fetches the `jwks_uri` it names.
 *
 * Why the exact `issuer` check (OpenID Connect Discovery §4.3): a document that names
 * another issuer is either a misconfiguration or an attempt to have us trust one issuer's
 * keys for another's tokens. Why re-read the document on each refresh: a provider that moves
 * its `jwks_uri` is then followed without a restart; refreshes are bounded by the cooldown.
 *
 * Why the `jwks_uri` must be on the issuer's origin (or one in `jwksOrigins`): the document
 * is data from the network, and following any URL it names lets whoever controls or spoofs
 * it aim our requests at internal services (SSRF: `http://127.0.0.1:8080/admin/...`). The
 * check runs before any request to that URL is made.
 *
 * `documentPath`: another metadata document with `issuer` and `jwks_uri` under the same
 * rules, e.g. an SSF transmitter's `/.well-known/ssf-configuration` (ssf/receiver.ts).
 */
export function createDiscoveredJwks(
  owner: KeySourceOwner,
  options: JwksOptions,
  deps: RemoteJwksDeps,
  jwksOrigins: readonly string[] = [],
  documentPath: string = DISCOVERY_PATH,
): IssuerKeys {
  const { issuer } = owner
  const document = discoveryUrl(issuer, documentPath)
  const allowed = new Set([document.origin, ...jwksOrigins.map((o) => new URL(o).origin)])
  const locate = async (signal: AbortSignal): Promise<URL> => {
    const metadata = await fetchJson(document, signal, deps.fetch, 'application/json')
    const { issuer: named, jwks_uri: jwksUri } = (metadata ?? {}) as Record<string, unknown>
    if (named !== issuer) throw new Error('the discovery document names another issuer')
    if (typeof jwksUri !== 'string') throw new Error('the discovery document has no jwks_uri')
    const target = checkJwksUrl(jwksUri)
    if (!allowed.has(target.origin)) {
      throw new Error(
        `the discovery document's jwks_uri is on ${target.origin}, not the issuer's origin (allow it with --jwks-origin)`,
      )
    }
    return target
  }
  const location = [documentPath, ...[...allowed].sort()].join(' ')
  return pooled(deps, poolKey(owner, 'oidc_discovery', location), () =>
    createKeySource(owner, locate, options, deps),
  )
}

/**
 * Pooled sources are matched by issuer, location and allow-list: keys are bound under the
 * allow-list, so a changed list needs a new source (and a new load) to take effect.
 */
function poolKey(owner: KeySourceOwner, kind: string, location: string): string {
  return [owner.issuer, kind, location, [...owner.algorithms].sort().join(',')].join('\u0000')
}

function pooled(deps: RemoteJwksDeps, key: string, create: () => RemoteJwks): IssuerKeys {
  return deps.pool === undefined ? create() : deps.pool.acquire(key, create)
}

/** Finds the JWKS URL for one refresh: fixed, or read from a discovery document. */
type Locate = (signal: AbortSignal) => Promise<URL>

function createKeySource(
  owner: KeySourceOwner,
  locate: Locate,
  options: JwksOptions,
  deps: RemoteJwksDeps,
): RemoteJwks {
  const { clock } = deps
  const { issuer } = owner
  const closer = new AbortController()
  let keys: readonly BoundKey[] | undefined
  /** The cache validity of each key in `keys`, carried over reads that keep the key. */
  let validityOf = new Map<BoundKey, KeyValidity>()
  let validityById = new Map<string, { readonly kid: string | undefined; validity: KeyValidity }>()
  /** `kid`s an earlier read published and a later one dropped, newest last (bounded). */
  const withdrawn = new Set<string>()
  /** From the last JWKS read, usable keys or not, and when it was read. */
  let skipped: readonly SkippedKey[] = []
  let skippedAt = Number.NEGATIVE_INFINITY
  let fetchedAt = Number.NEGATIVE_INFINITY
  /** When the request that fetched `keys` started: the key set is at least this recent. */
  let keysAsOf = Number.NEGATIVE_INFINITY
  let attemptedAt = Number.NEGATIVE_INFINITY
  let failingSince: number | null = null
  let inflight: Promise<boolean> | undefined

  const coolingDown = (now: number) => now - attemptedAt < options.cooldownMs
  const usableUntil = (readAt = fetchedAt) =>
    readAt + options.cacheMaxAgeMs + options.staleWhileErrorMs
  const due = (now: number) =>
    (keys === undefined || now - fetchedAt >= options.cacheMaxAgeMs) && !coolingDown(now)
  /**
   * The cache validity of the keys held: tokens verified with them are served from the
   * verified-token cache without a look until the key set is due to be read again (`due`),
   * then served while a background read runs, until the keys stop being usable.
   */
  const extendValidity = () => {
    const validUntilMs = usableUntil()
    const recheckAtMs = Math.min(
      validUntilMs,
      Math.max(fetchedAt + options.cacheMaxAgeMs, attemptedAt + options.cooldownMs),
    )
    for (const validity of validityOf.values()) {
      validity.recheckAtMs = recheckAtMs
      validity.validUntilMs = validUntilMs
    }
  }
  const recheck = () => {
    if (inflight === undefined && due(clock.now()) && !closer.signal.aborted) void refresh()
  }

  /**
   * Takes a newly read key set: keys still published keep their validity cell, dropped ones
   * have it set to 0 (their cached tokens are refused from now on) and their `kid`s are
   * remembered as withdrawn, unless the set still publishes (or skips) that `kid`.
   */
  function replaceKeys(fetched: readonly IdentifiedKey[]) {
    const nextById = new Map<string, { readonly kid: string | undefined; validity: KeyValidity }>()
    const nextOf = new Map<BoundKey, KeyValidity>()
    for (const { key, id } of fetched) {
      const validity = validityById.get(id)?.validity ?? {
        recheckAtMs: 0,
        validUntilMs: 0,
        recheck,
      }
      nextById.set(id, { kid: key.kid, validity })
      nextOf.set(key, validity)
    }
    const kept = new Set<string | null>([
      ...fetched.map(({ key }) => key.kid ?? null),
      ...skipped.map((key) => key.kid),
    ])
    for (const [id, { kid, validity }] of validityById) {
      if (nextById.has(id)) continue
      validity.recheckAtMs = 0
      validity.validUntilMs = 0
      if (kid !== undefined && !kept.has(kid)) {
        withdrawn.delete(kid)
        withdrawn.add(kid)
        if (withdrawn.size > MAX_WITHDRAWN_KIDS)
          withdrawn.delete(withdrawn.values().next().value as string)
      }
    }
    for (const kid of kept) if (kid !== null) withdrawn.delete(kid)
    validityById = nextById
    validityOf = nextOf
    keys = fetched.map(({ key }) => key)
  }

  function unavailable(): KeyLookup {
    const waitMs = Math.max(attemptedAt + options.cooldownMs - clock.now(), 0)
    const failure: AuthFailure = {
      code: 'unavailable',
      dependency: 'jwks',
      retryAfterSeconds: Math.max(1, Math.ceil(waitMs / 1000)),
    }
    return { ok: false, failure }
  }

  async function load(): Promise<boolean> {
    const startedAt = clock.now()
    attemptedAt = startedAt
    try {
      const signal = AbortSignal.any([AbortSignal.timeout(options.timeoutMs), closer.signal])
      const fetched = await fetchKeySet(await locate(signal), signal, deps.fetch, owner.algorithms)
      if (closer.signal.aborted) return false
      skipped = fetched.skipped
      skippedAt = clock.now()
      if (skipped.length > 0) deps.onSkippedKeys?.(issuer, skipped)
      // A set with no usable key at all counts as a failed fetch: the keys held are kept.
      if (fetched.keys.length === 0) throw new Error('JWKS has no usable key')
      replaceKeys(fetched.keys)
      fetchedAt = clock.now()
      keysAsOf = startedAt
      failingSince = null
      extendValidity()
      return true
    } catch {
      failingSince ??= clock.now()
      // Cached tokens are checked again once the next attempt is allowed (or keys expire).
      extendValidity()
      return false
    }
  }

  /** One request at a time: concurrent callers share the in-flight refresh. */
  function refresh(): Promise<boolean> {
    inflight ??= load().finally(() => {
      inflight = undefined
    })
    return inflight
  }

  return {
    issuer,
    async resolve(alg, kid, signedBeforeMs = clock.now()) {
      if (closer.signal.aborted) return unavailable()
      if (inflight !== undefined) await inflight
      else if (due(clock.now())) await refresh()
      // Why a skipped key is a 401 at once, before any outage or cooldown answer: the issuer
      // told us this key exists, and nothing a retry can bring changes that we cannot use it
      // (its material, its type, or our allow-list). A 503 would have the client retry what
      // never succeeds; refetching would not help either.
      if (signedBySkippedKey(kid)) {
        return { ok: false, failure: selectionFailure('unusable_key') }
      }
      if (keys === undefined || clock.now() >= usableUntil()) return unavailable()
      let selection = selectKey(keys, alg, kid)
      if (!selection.ok && selection.reason === 'unknown_key') {
        // An unknown kid may be a freshly rotated key: look again, at most once per cooldown.
        if (!coolingDown(clock.now())) {
          if (!(await refresh())) return unavailable()
          selection = selectKey(keys, alg, kid)
        }
        // Still unknown. Why 401 only when the key set is newer than the token: a provider
        // publishes a key before signing with it, so a set fetched after the token was signed
        // would hold its key, and the kid is really unknown. A set fetched earlier (we are in
        // the cooldown) may predate the key: "cannot tell yet" is 503 with Retry-After = the
        // rest of the cooldown, as for any key outage, and the client's retry meets the next
        // refetch. A refetch right here would close that window sooner, but `signedBeforeMs`
        // rests on an unverified `iat`, so any budget of extra refetches could be spent by
        // forged tokens (iat = now, made-up kid) just before the real one arrives: it would
        // raise the request rate to the provider without shortening the worst case. Rather,
        // the rate stays one per cooldown, and since any refetch after the key is published
        // learns it, nobody can hold the window open longer than one cooldown.
        // A kid we saw published and then dropped is no new key: the provider withdrew it,
        // so its tokens are 401 whatever their iat (no "cannot tell yet" for it).
        if (!selection.ok && selection.reason === 'unknown_key' && kid !== undefined) {
          if (withdrawn.has(kid)) return { ok: false, failure: selectionFailure('withdrawn_key') }
        }
        if (!selection.ok && selection.reason === 'unknown_key' && keysAsOf < signedBeforeMs) {
          return unavailable()
        }
      }
      if (!selection.ok) return { ok: false, failure: selectionFailure(selection.reason) }
      return { ok: true, key: selection.key, validity: validityOf.get(selection.key) }
    },
    status() {
      const now = clock.now()
      const state =
        keys === undefined || now >= usableUntil()
          ? 'unavailable'
          : now - fetchedAt < options.cacheMaxAgeMs
            ? 'fresh'
            : 'stale'
      const loadedAt = keys === undefined ? null : fetchedAt
      const skippedKeys = now < usableUntil(skippedAt) ? skipped : []
      return { issuer, state, loadedAt, failingSince, skippedKeys }
    },
    async warm() {
      if (closer.signal.aborted) return
      if (inflight !== undefined) await inflight
      else if (due(clock.now())) await refresh()
    },
    close() {
      closer.abort()
      for (const validity of validityOf.values()) {
        validity.recheckAtMs = 0
        validity.validUntilMs = 0
      }
      keys = undefined
      skipped = []
    },
  }

  /**
   * Whether the token's key is one the last JWKS read published but we skipped: its `kid`
   * names a skipped key and no usable one. A token without `kid` when a skipped key has none
   * and no usable key could be chosen counts too. Only while that read is within the same
   * bounds as usable keys (max age + stale allowance).
   */
  function signedBySkippedKey(kid: string | undefined): boolean {
    if (skipped.length === 0 || clock.now() >= usableUntil(skippedAt)) return false
    const named = kid ?? null
    if (!skipped.some((key) => key.kid === named)) return false
    return kid === undefined
      ? keys === undefined || keys.length === 0
      : !keys?.some((key) => key.kid === kid)
  }
}

/**
 * Remote key sources shared by successive verifiers of one registry. Issuers are re-read
 * whenever an operator changes one, and each change builds a new verifier; without a pool
 * every change would drop every issuer's cached keys, so adding issuer B while issuer A's
 * identity provider is down would turn A's stale-but-valid keys into 503s, and every change
 * would refetch every JWKS at once.
 *
 * Key sources are matched by issuer and location (a changed URL is a new source). Verifiers
 * cannot close pooled sources; {@link JwksPool.retain} closes the ones no verifier uses.
 */
export interface JwksPool {
  /** The live key source for `key`, created on first use. */
  acquire(key: string, create: () => RemoteJwks): IssuerKeys
  /**
   * Runs `build` (which creates one verifier), then closes every pooled source it did not
   * acquire. Returns what `build` returned.
   */
  retain<T>(build: () => T): T
  /** Every live source's status, in acquisition order. */
  statuses(): readonly JwksStatus[]
  /** Starts a background refresh of every source that is due (see `RemoteJwks.warm`). */
  warm(): Promise<void>
  close(): void
}

export function createJwksPool(): JwksPool {
  let live = new Map<string, RemoteJwks>()
  let used: Set<string> | undefined
  return {
    acquire(key, create) {
      used?.add(key)
      let source = live.get(key)
      if (source === undefined) {
        source = create()
        live.set(key, source)
      }
      const shared = source
      // The verifier's close() must not close a source the next verifier shares.
      return {
        resolve: (alg, kid, signedBeforeMs) => shared.resolve(alg, kid, signedBeforeMs),
        close() {},
      }
    },
    retain(build) {
      used = new Set()
      let result: ReturnType<typeof build>
      try {
        result = build()
      } catch (error) {
        used = undefined
        throw error
      }
      const next = new Map<string, RemoteJwks>()
      for (const [key, source] of live) {
        if (used.has(key)) next.set(key, source)
        else source.close()
      }
      live = next
      used = undefined
      return result
    },
    statuses: () => [...live.values()].map((source) => source.status()),
    async warm() {
      await Promise.all([...live.values()].map((source) => source.warm()))
    },
    close() {
      for (const source of live.values()) source.close()
      live = new Map()
    },
  }
}

/** Longer `kid`s are cut in status and logs: the value comes from the network. */
const MAX_REPORTED_KID = 128

/**
 * Withdrawn `kid`s remembered per key source (newest kept). Providers rotate every few days
 * or weeks; this bounds memory against a provider that churns keys.
 */
const MAX_WITHDRAWN_KIDS = 64

/**
 * A bound key and what identifies it across reads: its `kid`, algorithm and public
 * material. The same `kid` with other material is another key (the old one is withdrawn).
 */
interface IdentifiedKey {
  readonly key: BoundKey
  readonly id: string
}

function keyIdentity(jwk: Record<string, unknown>, key: BoundKey): string {
  const material = [jwk.kty, jwk.crv, jwk.n, jwk.e, jwk.x, jwk.y]
  return `${key.kid ?? ''}\u0000${key.alg}\u0000${JSON.stringify(material)}`
}

/**
 * Fetches a key set and binds each key under the issuer's allow-list (`bindIssuerJwk`).
 * Throws on a failed read (status, size, JSON, not a JWKS); the caller keeps its previous
 * keys. Keys that cannot be bound (broken material, `oct`, no allowed algorithm, ...) are
 * skipped and returned as such, not fatal: one odd key must not lock out the others.
 * Encryption keys are passed over without a word: a JWKS may rightly carry them.
 */
async function fetchKeySet(
  url: URL,
  signal: AbortSignal,
  fetchImpl: typeof globalThis.fetch,
  algorithms: readonly string[],
): Promise<{ keys: readonly IdentifiedKey[]; skipped: readonly SkippedKey[] }> {
  const document = await fetchJson(
    url,
    signal,
    fetchImpl,
    'application/jwk-set+json, application/json',
  )
  const listed = (document as { keys?: unknown } | null)?.keys
  if (!Array.isArray(listed)) throw new Error('not a JWKS')
  const keys: IdentifiedKey[] = []
  const skipped: SkippedKey[] = []
  for (const jwk of listed) {
    try {
      for (const key of bindIssuerJwk(jwk as Record<string, unknown>, algorithms)) {
        keys.push({ key, id: keyIdentity(jwk as Record<string, unknown>, key) })
      }
    } catch (error) {
      if (!(error instanceof JwkRefused)) throw error
      if (error.reason === 'not_for_signing') continue
      const kid = (jwk as { kid?: unknown } | null)?.kid
      skipped.push({
        kid: typeof kid === 'string' ? kid.slice(0, MAX_REPORTED_KID) : null,
        reason: error.reason,
        detail: error.message,
      })
    }
  }
  return { keys, skipped }
}

/**
 * GETs a JSON metadata document (a discovery or SSF configuration document) under the rules
 * of key sources: 200 only, no redirects, at most 256 KiB. Throws on anything else.
 */
export function fetchMetadata(
  url: URL,
  signal: AbortSignal,
  fetchImpl: typeof globalThis.fetch,
): Promise<unknown> {
  return fetchJson(url, signal, fetchImpl, 'application/json')
}

/**
 * GETs a JSON document: 200 only, redirects not followed (a redirect could lead anywhere,
 * including to plain http), at most {@link MAX_DOCUMENT_BYTES}.
 */
async function fetchJson(
  url: URL,
  signal: AbortSignal,
  fetchImpl: typeof globalThis.fetch,
  accept: string,
): Promise<unknown> {
  const response = await fetchImpl(url, { signal, redirect: 'manual', headers: { accept } })
  if (response.status !== 200) {
    await response.body?.cancel()
    throw new Error(`${url.pathname} answered ${response.status}`)
  }
  return JSON.parse(await readCapped(response, MAX_DOCUMENT_BYTES))
}

async function readCapped(response: Response, maxBytes: number): Promise<string> {
  if (response.body === null) return ''
  const reader = response.body.getReader()
  const chunks: Uint8Array[] = []
  let total = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    total += value.byteLength
    if (total > maxBytes) {
      await reader.cancel()
      throw new Error('document too large')
    }
    chunks.push(value)
  }
  return Buffer.concat(chunks).toString('utf8')
}
