import { createPublicKey, type KeyObject } from 'node:crypto'
import { readFileSync } from 'node:fs'
import type { KeySource } from '../core/issuer.ts'
import { UsageError } from './errors.ts'

/** Asymmetric JWS algorithms an issuer may use. */
export const ASYMMETRIC_ALGORITHMS = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
] as const
/** Shared-secret algorithms: only with an explicit secret (`--secret-file`). */
export const HMAC_ALGORITHMS = ['HS256', 'HS384', 'HS512'] as const

/** Minimum secret bytes per HMAC algorithm (RFC 7518 §3.2: at least the hash size). */
const MIN_SECRET_BYTES: Readonly<Record<string, number>> = { HS256: 32, HS384: 48, HS512: 64 }
const MIN_RSA_BITS = 2048
const CURVE_ALGORITHM: Readonly<Record<string, string>> = {
  'P-256': 'ES256',
  'P-384': 'ES384',
  'P-521': 'ES512',
  prime256v1: 'ES256',
  secp384r1: 'ES384',
  secp521r1: 'ES512',
}
/** Private JWK members: a JWKS handed to a verifier must hold public keys only. */
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'] as const

/** The one key source the operator named, read and validated. */
export type KeySourceInput =
  | { kind: 'jwks_url'; url: string }
  | { kind: 'jwks_file'; file: string }
  | { kind: 'pem_file'; file: string; algorithm: string | undefined }
  | { kind: 'secret_file'; file: string; algorithm: string | undefined }

/**
 * A JWKS URL: https, except plain http on the loopback host (a local test issuer), because
 * keys fetched over plain http from elsewhere can be swapped by anyone on the path.
 */
export function checkJwksUrl(text: string): KeySource {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    throw new UsageError(`--jwks-url: '${text}' is not a URL (expected https://...)`)
  }
  const loopback = ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname)
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && loopback)) {
    throw new UsageError(
      '--jwks-url: expected an https:// URL (plain http is accepted only for localhost / 127.0.0.1)',
    )
  }
  if (url.username || url.password) {
    throw new UsageError('--jwks-url: credentials in the URL are not accepted')
  }
  return { kind: 'jwks_url', url: url.href }
}

/** Reads and validates a JWKS file; every key ends up bound to one algorithm (`alg`). */
export function readJwksFile(file: string): KeySource {
  const where = `--jwks-file ${file}`
  let parsed: unknown
  try {
    parsed = JSON.parse(readText(file, '--jwks-file'))
  } catch (error) {
    if (error instanceof UsageError) throw error
    throw new UsageError(`${where}: not valid JSON (${(error as Error).message})`)
  }
  const keys = (parsed as { keys?: unknown } | null)?.keys
  if (!Array.isArray(keys) || keys.length === 0) {
    throw new UsageError(`${where}: expected a JSON Web Key Set: {"keys": [ ...at least one key ]}`)
  }
  const checked = keys.map((key, index) => checkJwk(key, `${where}: key ${index + 1}`))
  return { kind: 'jwks', jwks: { keys: checked } }
}

function checkJwk(key: unknown, where: string): Record<string, unknown> {
  if (key === null || typeof key !== 'object' || Array.isArray(key)) {
    throw new UsageError(`${where}: expected a JSON object`)
  }
  const jwk = key as Record<string, unknown>
  const label = typeof jwk.kid === 'string' ? `${where} (kid ${jwk.kid})` : where
  if (jwk.kty === 'oct') {
    throw new UsageError(`${label}: symmetric keys are not accepted in a JWKS; use --secret-file`)
  }
  if (PRIVATE_MEMBERS.some((member) => member in jwk)) {
    throw new UsageError(`${label}: contains private key material; give the public keys only`)
  }
  if (jwk.use !== undefined && jwk.use !== 'sig') {
    throw new UsageError(`${label}: "use" is ${JSON.stringify(jwk.use)}; expected "sig"`)
  }
  let keyObject: KeyObject
  try {
    keyObject = createPublicKey({ key: jwk as never, format: 'jwk' })
  } catch (error) {
    throw new UsageError(`${label}: not a usable public key (${(error as Error).message})`)
  }
  const alg = typeof jwk.alg === 'string' ? jwk.alg : inferAlgorithm(keyObject)
  if (alg === undefined) {
    throw new UsageError(
      `${label}: no "alg" and the key type allows several algorithms (e.g. RS256 or PS256); add "alg" to the key`,
    )
  }
  checkKeyMatchesAlgorithm(keyObject, alg, label)
  return { ...jwk, alg }
}

/** Reads a PEM public key (SPKI, or a certificate) bound to one algorithm; stored as SPKI. */
export function readPemFile(file: string, algorithm: string | undefined): KeySource {
  const where = `--pem-file ${file}`
  if (algorithm === undefined) {
    throw new UsageError(
      'missing --algorithm: --pem-file needs the one algorithm the key signs with (e.g. RS256, ES256, EdDSA)',
    )
  }
  const text = readText(file, '--pem-file')
  if (text.includes('PRIVATE KEY')) {
    throw new UsageError(`${where}: this is a private key; give the issuer's public key (SPKI PEM)`)
  }
  let keyObject: KeyObject
  try {
    keyObject = createPublicKey(text)
  } catch {
    throw new UsageError(
      `${where}: does not parse as a PEM public key (expected -----BEGIN PUBLIC KEY-----)`,
    )
  }
  checkKeyMatchesAlgorithm(keyObject, algorithm, where)
  const pem = keyObject.export({ type: 'spki', format: 'pem' }).toString()
  return { kind: 'pem', pem, algorithm }
}

/** Reads a shared secret (the file's bytes, one trailing newline dropped) for HS256/384/512. */
export function readSecretFile(file: string, algorithm: string | undefined): KeySource {
  if (algorithm === undefined || !(HMAC_ALGORITHMS as readonly string[]).includes(algorithm)) {
    throw new UsageError(`--secret-file needs --algorithm ${HMAC_ALGORITHMS.join(', ')}`)
  }
  let bytes: Buffer
  try {
    bytes = readFileSync(file)
  } catch (error) {
    throw new UsageError(
      `--secret-file ${file}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`,
    )
  }
  let end = bytes.length
  if (bytes[end - 1] === 0x0a) end--
  if (bytes[end - 1] === 0x0d) end--
  const secret = bytes.subarray(0, end)
  const min = MIN_SECRET_BYTES[algorithm] ?? 32
  if (secret.length < min) {
    throw new UsageError(
      `--secret-file ${file}: ${algorithm} needs a secret of at least ${min} bytes (got ${secret.length})`,
    )
  }
  return { kind: 'secret', secret: secret.toString('base64url'), algorithm }
}

function readText(file: string, flagName: string): string {
  try {
    return readFileSync(file, 'utf8')
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    throw new UsageError(`${flagName} ${file}: cannot read the file (${code ?? 'error'})`)
  }
}

/** The only algorithm a key can be used with, or undefined when several are possible. */
function inferAlgorithm(key: KeyObject): string | undefined {
  const type = key.asymmetricKeyType
  if (type === 'ec') return CURVE_ALGORITHM[key.asymmetricKeyDetails?.namedCurve ?? '']
  if (type === 'ed25519') return 'EdDSA'
  return undefined
}

/** Refuses an algorithm the key cannot produce, `none`, HMAC, and weak RSA keys. */
function checkKeyMatchesAlgorithm(key: KeyObject, alg: string, where: string): void {
  if (!(ASYMMETRIC_ALGORITHMS as readonly string[]).includes(alg)) {
    throw new UsageError(
      `${where}: algorithm '${alg}' is not accepted (expected one of ${ASYMMETRIC_ALGORITHMS.join(', ')})`,
    )
  }
  const type = key.asymmetricKeyType
  const family = alg.slice(0, 2)
  const fits =
    (type === 'rsa' && (family === 'RS' || family === 'PS')) ||
    (type === 'rsa-pss' && family === 'PS') ||
    (type === 'ec' && CURVE_ALGORITHM[key.asymmetricKeyDetails?.namedCurve ?? ''] === alg) ||
    (type === 'ed25519' && (alg === 'EdDSA' || alg === 'Ed25519'))
  if (!fits) {
    throw new UsageError(`${where}: a ${describeKey(key)} key cannot be used with ${alg}`)
  }
  const bits = key.asymmetricKeyDetails?.modulusLength
  if (bits !== undefined && bits < MIN_RSA_BITS) {
    throw new UsageError(`${where}: RSA keys must have at least ${MIN_RSA_BITS} bits (got ${bits})`)
  }
}

function describeKey(key: KeyObject): string {
  const curve = key.asymmetricKeyDetails?.namedCurve
  return curve ? `${key.asymmetricKeyType} ${curve}` : String(key.asymmetricKeyType)
}
