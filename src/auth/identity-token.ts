/**
 * The caller's identity as a short-lived JWT signed by tokengate (Ory Oathkeeper's
 * `id_token` mutator), for upstreams that prefer verifying a signature to trusting headers.
 * Sent as `X-Auth-Token` by the gateway and answered by the decision API; the public keys
 * are served as a JWKS (docs/forward-auth.md "Identity token").
 *
 * Every token is signed for one request: its own `jti` (an upstream may refuse a `jti` it has
 * seen, within the token's short life) and `aud` = the upstream it is bound for, so a token
 * handed to upstream A is refused by upstream B trusting the same JWKS. Signing per request
 * costs one signature (bench/identity-token.bench.ts; bench/README.md has the figures).
 *
 * Rotation without a false-rejection window:
 * - a new key enters the JWKS `publishAheadSec` before it signs anything, so an upstream
 *   whose cached JWKS is younger than that already knows it when the first token arrives;
 * - a key that stopped signing stays in the JWKS until every token it signed has expired
 *   (`ttlSec`, plus a minute of clock skew).
 */
import { createPrivateKey, type JsonWebKey, type KeyObject, randomUUID, sign } from 'node:crypto'
import { readFile, rename, writeFile } from 'node:fs/promises'
import { exportJWK, generateKeyPair, type JWK } from 'jose'
import type { Clock } from '../core/ports.ts'
import type { Principal } from '../core/principal.ts'

export interface IdentityTokenSettings {
  readonly issuer: string
  readonly audience?: string | undefined
  readonly ttlSec: number
  readonly algorithm: 'ES256' | 'EdDSA'
  readonly rotateAfterSec: number
  readonly publishAheadSec: number
}

export interface IdentityTokenSigner {
  /**
   * A new token for the principal, bound for `audience` (the upstream's origin) unless
   * `settings.audience` fixes one.
   */
  sign(principal: Principal, audience: string | undefined): Promise<string>
  /**
   * A Security Event Token (RFC 8417) of `claims`, signed with the current key under
   * `typ: secevent+jwt`: the CAEP transmitter's (ssf/transmitter.ts). The explicit type keeps
   * a SET from passing as an identity token (typ JWT, with sub and exp) and the reverse.
   */
  signSecurityEvent(claims: object): Promise<string>
  /** The public keys upstreams verify with: the next key, the current one, recent old ones. */
  jwks(): { keys: JWK[] }
}

interface StoredKey {
  readonly kid: string
  readonly alg: 'ES256' | 'EdDSA'
  /** Epoch ms from which the key signs (it is published before that). */
  readonly activatesAt: number
  readonly privateJwk: JWK
}

interface LiveKey extends StoredKey {
  readonly publicJwk: JWK
  readonly signingKey: KeyObject
  /** The base64url JWS protected header, the same for every token of the key. */
  readonly header: string
  /** The same for a Security Event Token (`typ: secevent+jwt`). */
  readonly setHeader: string
}

const CLOCK_SKEW_MS = 60_000

/**
 * Loads (or creates) the key file and returns the signer. The file holds private keys:
 * written with mode 0600, replaced atomically, re-read before each rotation so that
 * instances sharing it converge on the same keys.
 */
export async function createIdentityTokenSigner(
  settings: IdentityTokenSettings,
  keysFile: string,
  clock: Clock,
): Promise<IdentityTokenSigner> {
  const ttlMs = settings.ttlSec * 1000
  let keys: LiveKey[] = []
  let nextMaintenance = 0

  const maintain = async (now: number) => {
    const merged = new Map<string, StoredKey>()
    for (const key of [...keys, ...(await readKeys(keysFile))]) merged.set(key.kid, key)
    let stored = [...merged.values()].sort((a, b) => a.activatesAt - b.activatesAt)
    const plan = planKeys(stored, now, settings, ttlMs)
    let changed = plan.kept.length !== stored.length
    stored = plan.kept
    if (plan.add !== undefined) {
      stored.push(await generateKey(settings.algorithm, plan.add))
      changed = true
    }
    if (changed) await writeKeys(keysFile, stored)
    keys = await Promise.all(stored.map(liveKey))
    nextMaintenance = now + Math.min(60_000, settings.publishAheadSec * 500 || 60_000)
  }
  await maintain(clock.now())

  const current = (now: number): LiveKey => {
    let chosen = keys[0] as LiveKey
    for (const key of keys) if (key.activatesAt <= now) chosen = key
    return chosen
  }

  return {
    async sign(principal, audience) {
      const now = clock.now()
      if (now >= nextMaintenance) await maintain(now)
      const key = current(now)
      const aud = settings.audience ?? audience
      // A bug, not a caller's mistake: every front end that asks for identity names its upstream.
      if (!aud) throw new Error('identity token: no audience for this request')
      const expiresAt = Math.min(now + ttlMs, principal.expiresAt ?? Number.POSITIVE_INFINITY)
      const claims = {
        iss: settings.issuer,
        sub: principal.subject,
        aud,
        iat: Math.floor(now / 1000),
        exp: Math.floor(expiresAt / 1000),
        jti: randomUUID(),
        tenant_id: principal.tenantId,
        token_type: principal.tokenType,
        ...(principal.tokenId !== undefined ? { token_id: principal.tokenId } : {}),
        permissions: principal.permissions,
      }
      return compactJws(key.header, key, claims)
    },
    async signSecurityEvent(claims) {
      const now = clock.now()
      if (now >= nextMaintenance) await maintain(now)
      const key = current(now)
      return compactJws(key.setHeader, key, claims)
    },
    jwks() {
      return { keys: keys.map((key) => key.publicJwk) }
    },
  }
}

/**
 * Which keys to keep and whether to add one (its activation time). Pure, so the rotation
 * schedule is tested without waiting: the current key is the newest active one; a pending
 * key is created once the current key is within `publishAheadSec` of its rotation age; an
 * old key is dropped once the tokens it signed have all expired.
 */
export function planKeys(
  stored: readonly StoredKey[],
  now: number,
  settings: Pick<IdentityTokenSettings, 'rotateAfterSec' | 'publishAheadSec'>,
  ttlMs: number,
): { kept: StoredKey[]; add: number | undefined } {
  if (stored.length === 0) return { kept: [], add: now }
  const kept: StoredKey[] = []
  stored.forEach((key, i) => {
    const successor = stored[i + 1]
    const retiredAt = successor && successor.activatesAt <= now ? successor.activatesAt : undefined
    if (retiredAt === undefined || now < retiredAt + ttlMs + CLOCK_SKEW_MS) kept.push(key)
  })
  const newest = kept[kept.length - 1] as StoredKey
  if (newest.activatesAt > now) return { kept, add: undefined }
  const rotateAt = newest.activatesAt + settings.rotateAfterSec * 1000
  const publishAheadMs = settings.publishAheadSec * 1000
  if (now < rotateAt - publishAheadMs) return { kept, add: undefined }
  return { kept, add: Math.max(rotateAt, now + publishAheadMs) }
}

async function generateKey(alg: 'ES256' | 'EdDSA', activatesAt: number): Promise<StoredKey> {
  const { privateKey } = await generateKeyPair(alg, { extractable: true })
  return { kid: randomUUID(), alg, activatesAt, privateJwk: await exportJWK(privateKey) }
}

async function liveKey(key: StoredKey): Promise<LiveKey> {
  const { d: _private, ...publicPart } = key.privateJwk
  const header = JSON.stringify({ alg: key.alg, kid: key.kid, typ: 'JWT' })
  const setHeader = JSON.stringify({ alg: key.alg, kid: key.kid, typ: 'secevent+jwt' })
  return {
    ...key,
    publicJwk: { ...publicPart, kid: key.kid, alg: key.alg, use: 'sig' },
    signingKey: createPrivateKey({ key: key.privateJwk as JsonWebKey, format: 'jwk' }),
    header: Buffer.from(header).toString('base64url'),
    setHeader: Buffer.from(setHeader).toString('base64url'),
  }
}

/**
 * A compact JWS (RFC 7515) of the claims. Hand-written over node:crypto's synchronous `sign`:
 * jose signs through WebCrypto, which cost ~40–60 µs more per token (bench/identity-token).
 */
function compactJws(header: string, key: LiveKey, claims: object): string {
  const input = `${header}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`
  const signature =
    key.alg === 'ES256'
      ? sign('sha256', Buffer.from(input), { key: key.signingKey, dsaEncoding: 'ieee-p1363' })
      : sign(null, Buffer.from(input), key.signingKey)
  return `${input}.${signature.toString('base64url')}`
}

async function readKeys(file: string): Promise<StoredKey[]> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return []
    throw error
  }
  const parsed = JSON.parse(text) as { keys?: StoredKey[] }
  if (!Array.isArray(parsed.keys)) throw new Error(`${file}: not an identity key file`)
  return parsed.keys
}

async function writeKeys(file: string, keys: readonly StoredKey[]): Promise<void> {
  const stored = keys.map(({ kid, alg, activatesAt, privateJwk }) => ({
    kid,
    alg,
    activatesAt,
    privateJwk,
  }))
  const temporary = `${file}.${process.pid}.tmp`
  await writeFile(temporary, `${JSON.stringify({ keys: stored }, null, 2)}\n`, { mode: 0o600 })
  await rename(temporary, file)
}
