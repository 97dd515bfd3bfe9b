import { Buffer } from 'node:buffer'
import { createHmac, hash, randomBytes } from 'node:crypto'
import { checkPatFormat, isPatToken, patLast4 } from './pat.ts'

/** Tokens longer than this are not decoded for a fingerprint (the parse work stays bounded). */
const MAX_DECODED_TOKEN_LENGTH = 8_192
/** Each claim shown in a fingerprint is cut to this many characters. */
const MAX_FIELD_LENGTH = 64
/** Characters allowed in a fingerprint field; anything else becomes `_`. */
const UNSAFE_FIELD_CHARS = /[^A-Za-z0-9._:/@+-]/g
const JWS_COMPACT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/

/**
 * A log-safe identifier of a bearer token: enough to correlate requests and find the token,
 * never enough to use it (SPEC §5.5: never log a full token).
 *
 * - well-formed PAT: `pat_…` + its last 4 characters (what the operator CLI displays);
 * - JWT (compact JWS): `jwt:iss=<iss>;kid=<kid>;sub=<sub>` read from the *unverified*
 *   header and payload (`-` when absent), or `jwt:unparseable`;
 * - anything else: `hmac:` + 8 hex digits of an HMAC-SHA256, under a key drawn at random
 *   when the process starts, of the token's SHA-256: stable within the process (to correlate
 *   its log lines), and never a prefix of the token's hash, which would help test guesses of
 *   a mistyped real PAT against logs and traces. It changes with every process.
 *
 * Why these choices: the JWT signature is the only secret part of a JWT, so it is never
 * included; the claims are attacker-controlled until verified, so each is restricted to a
 * small character set and cut to 64 characters, which keeps log lines injection-free and
 * bounded. A malformed `pat_` string may be a real PAT with a typo, so its characters are
 * never shown; a 32-bit hash prefix cannot be reversed into a 190-bit secret.
 */
export function fingerprintToken(token: string, sha256Hex?: string): string {
  if (isPatToken(token) && checkPatFormat(token).ok) return patFingerprint(patLast4(token))
  if (!isPatToken(token)) return fingerprintJwtToken(token, sha256Hex)
  return hmacFingerprint(token, sha256Hex)
}

/** A JWT's fingerprint from its unverified claims, or `hmacFingerprint` when it is no JWS. */
export function fingerprintJwtToken(token: string, sha256Hex?: string): string {
  if (token.length <= MAX_DECODED_TOKEN_LENGTH && JWS_COMPACT.test(token)) {
    return fingerprintJwt(token)
  }
  return hmacFingerprint(token, sha256Hex)
}

/** `hmac:` + 8 hex digits: any credential's fingerprint that shows nothing of it. */
export function hmacFingerprint(token: string, sha256Hex?: string): string {
  // `sha256Hex`: the token's SHA-256 when the caller has it already (the server hashed a
  // `pat_…` value for its lookup), so a flood of malformed PATs hashes each token once.
  const digest = sha256Hex ?? hash('sha256', token, 'hex')
  return `hmac:${createHmac('sha256', FINGERPRINT_KEY).update(digest).digest('hex').slice(0, 8)}`
}

/** The key of `hmac:` fingerprints: this process's own, never stored or logged. */
const FINGERPRINT_KEY = randomBytes(32)

function fingerprintJwt(token: string): string {
  const [headerPart = '', payloadPart = ''] = token.split('.')
  const header = decodeJsonObject(headerPart)
  const payload = decodeJsonObject(payloadPart)
  if (header === undefined || payload === undefined) return 'jwt:unparseable'
  return jwtFingerprint(payload.iss, header.kid, payload.sub)
}

/** The fingerprint of a PAT from its last four characters: `pat_…abcd`. */
export function patFingerprint(last4: string): string {
  return `pat_…${field(last4)}`
}

/**
 * `patFingerprint` of a token `checkPatFormat` passed: its last four characters are base62,
 * which `field` leaves as they are, so they need no sanitising per request (issue #36).
 */
export function checkedPatFingerprint(token: string): string {
  return `pat_…${token.slice(-4)}`
}

/**
 * The fingerprint of a JWT from its `iss`, `kid` and `sub` (verified values when the caller
 * has them, which saves decoding the token again). Each is sanitised and cut as above.
 */
export function jwtFingerprint(iss: unknown, kid: unknown, sub: unknown): string {
  return `jwt:iss=${field(iss)};kid=${field(kid)};sub=${field(sub)}`
}

function decodeJsonObject(part: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'))
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined
  } catch {
    return undefined
  }
}

function field(value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) return '-'
  const safe = value.slice(0, MAX_FIELD_LENGTH).replace(UNSAFE_FIELD_CHARS, '_')
  return value.length > MAX_FIELD_LENGTH ? `${safe}…` : safe
}
