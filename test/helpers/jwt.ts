/**
 * JWT test helpers, for any test that needs real signed tokens.
 *
 * - `createTestIssuer({ alg = 'ES256', issuer = 'https://issuer.test', audience = 'tokengate',
 *   kid, tenantClaim, fixed, permissionsClaim, keySource, algorithms, clock })` generates a
 *   fresh key pair (or HMAC secret) and returns `{ config, sign, claims, privateKey,
 *   publicKey, publicJwk, publicPem, kid }`. `config` is an `IssuerConfig` with an inline
 *   JWKS (or a PEM with `keySource: 'pem'`; a shared secret for HS*), ready for
 *   `createJwtVerifier([config])`.
 * - `issuer.sign(claims?, { header?, expiresInSec?, nowMs? })` signs default claims
 *   (iss, aud, sub `user-1`, tenant `tenant-a`, permissions `['tokens:read']`, iat now,
 *   exp now + 300 s) merged with `claims`; a claim set to `undefined` is removed. Header
 *   fields in `header` are merged over `{ alg, kid }` (set `kid: undefined` to drop it).
 * - `signCompact(header, payload, key, alg?)` signs anything, including headers jose's own
 *   signer refuses (`alg: none`, unknown `crit`, mismatched `alg`), with node:crypto only.
 * - `createManualClock(startMs)` is a `Clock` that moves only when told.
 * - `startKeyServer(jwks?)` serves a JWKS on 127.0.0.1:0 and counts requests; it can
 *   answer with an error, hang, or stop listening.
 *
 * @example
 * const issuer = createTestIssuer({ alg: 'RS256' })
 * const verifier = createJwtVerifier([issuer.config])
 * const token = await issuer.sign({ permissions: ['tokens:read'] })
 */
import { Buffer } from 'node:buffer'
import {
  constants,
  createHmac,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  sign as signBytes,
} from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { IssuerConfig } from '../../src/core/issuer.ts'
import type { Clock } from '../../src/core/ports.ts'

export type TestAlgorithm =
  | 'RS256'
  | 'RS384'
  | 'RS512'
  | 'PS256'
  | 'PS384'
  | 'PS512'
  | 'ES256'
  | 'ES384'
  | 'ES512'
  | 'EdDSA'
  | 'HS256'
  | 'HS384'
  | 'HS512'

export const TEST_ISSUER = 'https://issuer.test'
export const TEST_AUDIENCE = 'tokengate'
export const TEST_TENANT = 'tenant-a'
export const TEST_SUBJECT = 'user-1'
/** A fixed instant (2026-01-01T00:00:00Z) for tests that inject a clock. */
export const TEST_EPOCH_MS = Date.UTC(2026, 0, 1)

/** A `Clock` that only moves when told to. */
export interface ManualClock extends Clock {
  advance(ms: number): void
  set(ms: number): void
}

export function createManualClock(startMs: number = TEST_EPOCH_MS): ManualClock {
  let current = startMs
  return {
    now: () => current,
    advance(ms) {
      current += ms
    },
    set(ms) {
      current = ms
    },
  }
}

/** A public/private key pair in every shape a test may need. */
export interface TestKeyPair {
  readonly privateKey: KeyObject
  readonly publicKey: KeyObject
  /** The public JWK, without `kid`/`alg`/`use`. */
  readonly publicJwk: Record<string, unknown>
  readonly publicPem: string
}

/** Generates a fresh key pair for an asymmetric algorithm. */
export function generateTestKeyPair(alg: TestAlgorithm): TestKeyPair {
  const pair = generatePair(alg)
  return {
    ...pair,
    publicJwk: pair.publicKey.export({ format: 'jwk' }) as Record<string, unknown>,
    publicPem: pair.publicKey.export({ format: 'pem', type: 'spki' }).toString(),
  }
}

function generatePair(alg: TestAlgorithm): { privateKey: KeyObject; publicKey: KeyObject } {
  if (alg.startsWith('RS') || alg.startsWith('PS')) {
    return generateKeyPairSync('rsa', { modulusLength: 2048 })
  }
  if (alg === 'ES256') return generateKeyPairSync('ec', { namedCurve: 'P-256' })
  if (alg === 'ES384') return generateKeyPairSync('ec', { namedCurve: 'P-384' })
  if (alg === 'ES512') return generateKeyPairSync('ec', { namedCurve: 'P-521' })
  if (alg === 'EdDSA') return generateKeyPairSync('ed25519')
  throw new Error(`no key pair for ${alg}`)
}

const encodeJson = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')

/**
 * The base64url signature of `signingInput` under `alg` (RS*, PS*, ES*, EdDSA, HS*).
 * `key` is a private `KeyObject`, or the secret bytes for HS*.
 */
export function signInput(signingInput: string, key: KeyObject | Uint8Array, alg: string): string {
  const data = Buffer.from(signingInput)
  const bits = alg.slice(2)
  if (alg.startsWith('HS')) {
    return createHmac(`sha${bits}`, key as Uint8Array)
      .update(data)
      .digest('base64url')
  }
  const privateKey = key as KeyObject
  if (alg.startsWith('RS')) return signBytes(`sha${bits}`, data, privateKey).toString('base64url')
  if (alg.startsWith('PS')) {
    const saltLength = Number(bits) / 8
    return signBytes(`sha${bits}`, data, {
      key: privateKey,
      padding: constants.RSA_PKCS1_PSS_PADDING,
      saltLength,
    }).toString('base64url')
  }
  if (alg.startsWith('ES')) {
    return signBytes(`sha${bits}`, data, { key: privateKey, dsaEncoding: 'ieee-p1363' }).toString(
      'base64url',
    )
  }
  if (alg === 'EdDSA' || alg === 'Ed25519') {
    return signBytes(null, data, privateKey).toString('base64url')
  }
  throw new Error(`cannot sign with ${alg}`)
}

/**
 * Builds a compact JWS from any header and payload. Signs with `alg` (default: the header's
 * `alg`); with `key` undefined the signature is empty.
 */
export function signCompact(
  header: Record<string, unknown>,
  payload: Record<string, unknown>,
  key: KeyObject | Uint8Array | undefined,
  alg: string = header.alg as string,
): string {
  const signingInput = `${encodeJson(header)}.${encodeJson(payload)}`
  const signature = key === undefined ? '' : signInput(signingInput, key, alg)
  return `${signingInput}.${signature}`
}

export interface TestIssuerOptions {
  readonly alg?: TestAlgorithm
  readonly issuer?: string
  readonly audience?: string
  /** Key id. Default `<alg>-key`; HS* keys have none. */
  readonly kid?: string
  readonly tenantClaim?: string
  /** A fixed tenant instead of a tenant claim. */
  readonly fixed?: string
  readonly permissionsClaim?: string
  /** Inline JWKS (default) or SPKI PEM; HS* always uses a secret. */
  readonly keySource?: 'jwks' | 'pem'
  readonly algorithms?: readonly string[]
  /** Clock for `iat`/`exp` of signed tokens. Default the system clock. */
  readonly clock?: Clock
}

export interface SignOptions {
  /** Merged over `{ alg, kid }`; a field set to `undefined` is removed. */
  readonly header?: Record<string, unknown>
  /** `exp` = now + this. Default 300. */
  readonly expiresInSec?: number
  /** "Now" for `iat`/`exp`, in epoch ms. Default the issuer's clock. */
  readonly nowMs?: number
}

export interface TestIssuer {
  readonly config: IssuerConfig
  readonly alg: TestAlgorithm
  readonly kid: string | undefined
  /** Signs default claims merged with `claims` (a claim set to `undefined` is removed). */
  sign(claims?: Record<string, unknown>, options?: SignOptions): Promise<string>
  /** The payload `sign` would sign. */
  claims(claims?: Record<string, unknown>, options?: SignOptions): Record<string, unknown>
  /** Private key, or the secret bytes for HS*. */
  readonly privateKey: KeyObject | Uint8Array
  /** Public key; undefined for HS*. */
  readonly publicKey: KeyObject | undefined
  /** Public JWK with `kid`, `alg` and `use`; undefined for HS*. */
  readonly publicJwk: Record<string, unknown> | undefined
  /** SPKI PEM; undefined for HS*. */
  readonly publicPem: string | undefined
}

/** A trusted issuer with a fresh key, and a signer for its tokens. */
export function createTestIssuer(options: TestIssuerOptions = {}): TestIssuer {
  const alg = options.alg ?? 'ES256'
  const issuer = options.issuer ?? TEST_ISSUER
  const audience = options.audience ?? TEST_AUDIENCE
  const clock = options.clock ?? { now: () => Date.now() }
  const tenant =
    options.fixed !== undefined
      ? { fixed: options.fixed }
      : { claim: options.tenantClaim ?? 'tenant_id' }
  const common = {
    issuer,
    audiences: [audience],
    tenant,
    permissionsClaim: options.permissionsClaim,
    algorithms: options.algorithms,
  }
  let config: IssuerConfig
  let privateKey: KeyObject | Uint8Array
  let publicKey: KeyObject | undefined
  let publicJwk: Record<string, unknown> | undefined
  let publicPem: string | undefined
  let kid: string | undefined
  if (alg.startsWith('HS')) {
    const secret = randomBytes(Number(alg.slice(2)) / 8)
    privateKey = secret
    config = {
      ...common,
      keySource: { kind: 'secret', secret: secret.toString('base64url'), algorithm: alg },
    }
  } else {
    const pair = generateTestKeyPair(alg)
    kid = options.kid ?? `${alg.toLowerCase()}-key`
    privateKey = pair.privateKey
    publicKey = pair.publicKey
    publicJwk = { ...pair.publicJwk, kid, alg, use: 'sig' }
    publicPem = pair.publicPem
    config =
      options.keySource === 'pem'
        ? { ...common, keySource: { kind: 'pem', pem: publicPem, algorithm: alg, kid } }
        : { ...common, keySource: { kind: 'jwks', jwks: { keys: [publicJwk] } } }
  }
  const tenantClaim: string =
    options.fixed === undefined ? (options.tenantClaim ?? 'tenant_id') : 'tenant_id'
  const permissionsClaim = options.permissionsClaim ?? 'permissions'

  function claims(overrides: Record<string, unknown> = {}, signOptions: SignOptions = {}) {
    const nowSec = Math.floor((signOptions.nowMs ?? clock.now()) / 1000)
    const payload: Record<string, unknown> = {
      iss: issuer,
      aud: audience,
      sub: TEST_SUBJECT,
      [tenantClaim]: TEST_TENANT,
      [permissionsClaim]: permissionsClaim === 'scope' ? 'tokens:read' : ['tokens:read'],
      iat: nowSec,
      exp: nowSec + (signOptions.expiresInSec ?? 300),
      ...overrides,
    }
    return dropUndefined(payload)
  }

  return {
    config,
    alg,
    kid,
    privateKey,
    publicKey,
    publicJwk,
    publicPem,
    claims,
    async sign(overrides, signOptions = {}) {
      const header = dropUndefined({ alg, kid, ...signOptions.header })
      return signCompact(header, claims(overrides, signOptions), privateKey, alg)
    },
  }
}

function dropUndefined(record: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(record).filter(([, value]) => value !== undefined))
}

export type KeyServerMode = 'ok' | 'error' | 'hang'

/** A local HTTP server standing in for an identity provider's JWKS endpoint. */
export interface KeyServer {
  readonly url: string
  /** Requests received so far (any path). */
  readonly requests: number
  setJwks(jwks: unknown): void
  /** `ok` serves the JWKS, `error` answers 500, `hang` never answers. */
  setMode(mode: KeyServerMode): void
  /** Delay before each answer, in milliseconds (default 0: at once). */
  setDelay(ms: number): void
  /** Stops listening and drops connections: later requests are refused. */
  close(): Promise<void>
}

/** Starts a JWKS server on 127.0.0.1 with a random port. */
export async function startKeyServer(jwks: unknown = { keys: [] }): Promise<KeyServer> {
  let body = JSON.stringify(jwks)
  let mode: KeyServerMode = 'ok'
  let delayMs = 0
  let requests = 0
  const server = createServer((_request: IncomingMessage, response: ServerResponse) => {
    requests++
    if (mode === 'hang') return
    const current = mode // the mode when the request arrived, even if answered later
    const answer = () => {
      if (current === 'error') response.writeHead(500).end()
      else response.writeHead(200, { 'content-type': 'application/jwk-set+json' }).end(body)
    }
    if (delayMs > 0) setTimeout(answer, delayMs)
    else answer()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  let closed = false
  return {
    url: `http://127.0.0.1:${port}/jwks.json`,
    get requests() {
      return requests
    },
    setJwks(next) {
      body = JSON.stringify(next)
    },
    setMode(next) {
      mode = next
    },
    setDelay(ms) {
      delayMs = ms
    },
    async close() {
      if (closed) return
      closed = true
      const done = new Promise<void>((resolve) => server.close(() => resolve()))
      server.closeAllConnections()
      await done
    },
  }
}
