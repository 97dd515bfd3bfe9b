import { randomUUID } from 'node:crypto'
import { mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { exportJWK, generateKeyPair, importJWK, type JWK, SignJWT } from 'jose'
import type { IssuerConfig } from '../core/issuer.ts'
import { createFileOnce } from '../lib/create-once.ts'

/**
 * The local dev JWT issuer: an ES256 key pair kept in the data directory, so `npm start`
 * and `tokengate jwt mint` can produce real, verifiable access tokens without an identity
 * provider. Used only in dev mode; a production deployment registers its real issuers.
 */
export const DEV_ISSUER = 'https://dev-issuer.tokengate.local'
export const DEV_AUDIENCE = 'tokengate'
const KEY_FILE = 'dev-issuer-key.json'

interface DevKeyFile {
  readonly kid: string
  readonly privateJwk: JWK
  readonly publicJwk: JWK
}

/** Loads the dev key pair from `dataDir`, creating it (mode 0600) on first use. */
export async function ensureDevIssuerKey(dataDir: string): Promise<DevKeyFile> {
  const path = join(dataDir, KEY_FILE)
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as DevKeyFile
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
  }
  const kid = `dev-${randomUUID()}`
  const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true })
  const privateJwk = { ...(await exportJWK(privateKey)), kid, alg: 'ES256', use: 'sig' }
  const publicJwk = { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' }
  const file: DevKeyFile = { kid, privateJwk, publicJwk }
  mkdirSync(dataDir, { recursive: true, mode: 0o700 })
  // Another process starting on the same directory may have created it meanwhile: its key.
  const text = createFileOnce(path, `${JSON.stringify(file, null, 2)}\n`, 0o600)
  return JSON.parse(text) as DevKeyFile
}

/** The issuer registration for the dev key: inline JWKS, tenant from `tenant_id`. */
export function devIssuerConfig(key: DevKeyFile): IssuerConfig {
  return {
    issuer: DEV_ISSUER,
    audiences: [DEV_AUDIENCE],
    keySource: { kind: 'jwks', jwks: { keys: [key.publicJwk as Record<string, unknown>] } },
    algorithms: ['ES256'],
    tenant: { claim: 'tenant_id' },
    permissionsClaim: 'permissions',
  }
}

export interface MintOptions {
  readonly tenantId: string
  readonly subject: string
  readonly permissions: readonly string[]
  /** Lifetime in seconds (default 900). */
  readonly ttlSec?: number
  /** Epoch milliseconds (default now). */
  readonly now?: number
}

/** Signs an access token with the dev issuer key. Dev mode only. */
export async function mintDevJwt(dataDir: string, options: MintOptions): Promise<string> {
  const key = await ensureDevIssuerKey(dataDir)
  const privateKey = await importJWK(key.privateJwk, 'ES256')
  const iat = Math.floor((options.now ?? Date.now()) / 1000)
  return new SignJWT({ tenant_id: options.tenantId, permissions: [...options.permissions] })
    .setProtectedHeader({ alg: 'ES256', kid: key.kid, typ: 'at+jwt' })
    .setIssuer(DEV_ISSUER)
    .setAudience(DEV_AUDIENCE)
    .setSubject(options.subject)
    .setIssuedAt(iat)
    .setExpirationTime(iat + (options.ttlSec ?? 900))
    .setJti(randomUUID())
    .sign(privateKey)
}
