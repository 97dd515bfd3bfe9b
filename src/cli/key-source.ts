import { createPublicKey, type KeyObject } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { DEFAULT_ALGORITHMS, type KeySource } from '../core/issuer.ts'
import { checkJwksUrl as checkCoreJwksUrl } from '../core/jwks.ts'
import {
  type BoundKey,
  bindIssuerJwk,
  bindJwk,
  bindPem,
  HMAC_ALGORITHMS,
  secretKeySource,
} from '../core/jwt-keys.ts'
import { UsageError } from './errors.ts'

/**
 * The operator's key files and URLs, read and checked by the core's own key rules (the same
 * binding the server does at start), so `issuer add` accepts exactly what the server will
 * use. This file only reads files and words the core's verdicts for the flag given.
 */

/** A JWKS URL: https, except plain http on the loopback host; no credentials. */
export function readJwksUrl(text: string): KeySource {
  let url: URL
  try {
    url = checkCoreJwksUrl(text)
  } catch (error) {
    throw new UsageError(`--jwks-url: ${(error as Error).message}`)
  }
  return { kind: 'jwks_url', url: url.href }
}

/**
 * Reads a JWKS file; every key is bound by the core as the server will bind it, under
 * `algorithms` (the `--algorithms` list). A key bound to one algorithm is stored with that
 * `alg`; an RSA key without `alg` bound to several is stored as given and bound under the
 * issuer's list when the server loads it.
 */
export function readJwksFile(file: string, algorithms: readonly string[] | undefined): KeySource {
  const where = `--jwks-file ${file}`
  let parsed: unknown
  try {
    parsed = JSON.parse(readText(file, '--jwks-file'))
  } catch (error) {
    if (error instanceof UsageError) throw error
    // Not the parser's message: it quotes the file's text, which may be anything (a secret).
    const position = /position (\d+)/.exec((error as Error).message)?.[1]
    throw new UsageError(`${where}: not valid JSON${position ? ` (at character ${position})` : ''}`)
  }
  const keys = (parsed as { keys?: unknown } | null)?.keys
  if (!Array.isArray(keys) || keys.length === 0) {
    throw new UsageError(`${where}: expected a JSON Web Key Set: {"keys": [ ...at least one key ]}`)
  }
  const checked = keys.map((key: unknown, index) => {
    const label =
      key && typeof (key as { kid?: unknown }).kid === 'string'
        ? `${where}: key ${index + 1} (kid ${(key as { kid: string }).kid})`
        : `${where}: key ${index + 1}`
    if (key === null || typeof key !== 'object' || Array.isArray(key)) {
      throw new UsageError(`${label}: expected a JSON object`)
    }
    const jwk = key as Record<string, unknown>
    const algs = bound(label, () => bindFileKey(jwk, algorithms)).map((k) => k.alg)
    return algs.length === 1 ? { ...jwk, alg: algs[0] } : jwk
  })
  return { kind: 'jwks', jwks: { keys: checked } }
}

/**
 * The allow-list of a JWKS file given without `--algorithms`: every algorithm its keys are
 * bound to (see {@link readJwksFile}).
 */
export function jwksFileAlgorithms(keys: readonly Record<string, unknown>[]): readonly string[] {
  return [...new Set(keys.flatMap((jwk) => bindFileKey(jwk, undefined).map((k) => k.alg)))]
}

/**
 * Without `--algorithms`, a key's own algorithm is allowed (named, or the one its EC curve or
 * Ed25519 admits); an RSA key without `alg` fits several and gets the server's default RSA
 * ones (RS256, PS256), never all six.
 */
function bindFileKey(
  jwk: Record<string, unknown>,
  algorithms: readonly string[] | undefined,
): readonly BoundKey[] {
  if (algorithms !== undefined) return bindIssuerJwk(jwk, algorithms)
  if (jwk.kty === 'RSA' && jwk.alg === undefined) return bindIssuerJwk(jwk, DEFAULT_ALGORITHMS)
  return [bindJwk(jwk)]
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
    // A certificate is accepted too: its public key is what gets stored.
    keyObject = createPublicKey(text)
  } catch {
    throw new UsageError(
      `${where}: does not parse as a PEM public key (expected -----BEGIN PUBLIC KEY-----)`,
    )
  }
  const pem = keyObject.export({ type: 'spki', format: 'pem' }).toString()
  bound(where, () => bindPem(pem, algorithm, undefined))
  return { kind: 'pem', pem, algorithm }
}

/** Reads a shared secret (the file's bytes, one trailing newline dropped) for HS256/384/512. */
export function readSecretFile(file: string, algorithm: string | undefined): KeySource {
  if (algorithm === undefined || !HMAC_ALGORITHMS.includes(algorithm)) {
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
  return bound(`--secret-file ${file}`, () => secretKeySource(bytes, algorithm))
}

/** Runs the core's binding; its refusal becomes a usage error naming the flag and file. */
function bound<T>(where: string, bind: () => T): T {
  try {
    return bind()
  } catch (error) {
    throw new UsageError(`${where}: ${(error as Error).message}`)
  }
}

function readText(file: string, flagName: string): string {
  try {
    return readFileSync(file, 'utf8')
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    throw new UsageError(`${flagName} ${file}: cannot read the file (${code ?? 'error'})`)
  }
}
