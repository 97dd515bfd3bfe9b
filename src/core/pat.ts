import { hash, randomBytes } from 'node:crypto'
import { crc32 } from 'node:zlib'
import { CRC32_START, crc32End, crc32Step } from '../lib/crc32.ts'
import type { PatRecord } from './ports.ts'

/**
 * Personal Access Token format (DESIGN "PAT format and storage"):
 *
 *     pat_ + 32 base62 chars (CSPRNG, ~190 bits) + 6 base62 chars (CRC32 of the 32)
 *
 * The checksum is not a security control (anyone can compute a CRC); it lets the server and
 * secret scanners reject typos and garbage without touching the store, so guessing floods
 * cost a string check instead of a database query.
 */
export const PAT_PREFIX = 'pat_'
export const PAT_RANDOM_LENGTH = 32
export const PAT_CHECKSUM_LENGTH = 6
/** Total length of a PAT, prefix included: 42. */
export const PAT_LENGTH = PAT_PREFIX.length + PAT_RANDOM_LENGTH + PAT_CHECKSUM_LENGTH

/**
 * Finds PATs in text, for secret scanners and log scrubbers: `pat_` + 38 base62 characters
 * between word boundaries. Confirm a hit with `checkPatFormat` (the checksum) to discard
 * look-alikes. No `g` flag, so `.test()` keeps no state; to find every match use
 * `text.matchAll(new RegExp(PAT_PATTERN.source, 'g'))`.
 */
export const PAT_PATTERN = /\bpat_[0-9A-Za-z]{38}\b/

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

export type PatFormatCheck =
  | { readonly ok: true }
  | { readonly ok: false; readonly reason: 'malformed' | 'bad_checksum' }

/**
 * Uniform random base62 string from the CSPRNG.
 *
 * Why rejection sampling: `byte % 62` would favour the first 8 characters (256 is not a
 * multiple of 62). Masking to 6 bits and discarding 62 and 63 keeps every character exactly
 * equally likely, at the cost of ~3% of the random bytes.
 */
export function randomBase62(length: number): string {
  let out = ''
  while (out.length < length) {
    const bytes = randomBytes(length + 8)
    for (let i = 0; i < bytes.length && out.length < length; i++) {
      const sixBits = (bytes[i] as number) & 0x3f
      if (sixBits < 62) out += BASE62[sixBits]
    }
  }
  return out
}

/** Big-endian base62 of an unsigned 32-bit integer, zero-padded to 6 characters. */
function encodeChecksum(value: number): string {
  let out = ''
  let rest = value
  for (let i = 0; i < PAT_CHECKSUM_LENGTH; i++) {
    out = BASE62[rest % 62] + out
    rest = Math.floor(rest / 62)
  }
  return out
}

function checksumOf(random: string): string {
  return encodeChecksum(crc32(random))
}

/**
 * Generates a new PAT: `pat_` + 32 random base62 characters + 6-character checksum.
 *
 * @example
 * generatePat() // 'pat_3kq9...' (42 characters)
 */
export function generatePat(): string {
  const random = randomBase62(PAT_RANDOM_LENGTH)
  return PAT_PREFIX + random + checksumOf(random)
}

/**
 * Checks a PAT's shape without any store access: prefix, length, alphabet, then checksum.
 * `malformed` for the first three, `bad_checksum` when only the checksum is wrong.
 */
export function checkPatFormat(token: string): PatFormatCheck {
  if (token.length !== PAT_LENGTH || !token.startsWith(PAT_PREFIX)) return MALFORMED
  // One pass, no slices or regular expression (issue #36: this check cost as much as the
  // token's SHA-256): each body character's base62 value, the CRC-32 of the random part summed
  // as it is read (not a second pass over it), the checksum read as a number (6 base62 digits
  // name one number, so comparing numbers is comparing the strings).
  const start = PAT_PREFIX.length
  const checksumAt = start + PAT_RANDOM_LENGTH
  let crc = CRC32_START
  for (let i = start; i < checksumAt; i++) {
    const code = token.charCodeAt(i)
    if (code >= 128 || (BASE62_VALUES[code] as number) < 0) return MALFORMED
    crc = crc32Step(crc, code)
  }
  let written = 0
  for (let i = checksumAt; i < PAT_LENGTH; i++) {
    const code = token.charCodeAt(i)
    const digit = code < 128 ? (BASE62_VALUES[code] as number) : -1
    if (digit < 0) return MALFORMED
    written = written * 62 + digit
  }
  return written === crc32End(crc) ? WELL_FORMED : BAD_CHECKSUM
}

const WELL_FORMED: PatFormatCheck = Object.freeze({ ok: true })
const MALFORMED: PatFormatCheck = Object.freeze({ ok: false, reason: 'malformed' })
const BAD_CHECKSUM: PatFormatCheck = Object.freeze({ ok: false, reason: 'bad_checksum' })

/** Each ASCII code's base62 digit, -1 outside the alphabet. */
const BASE62_VALUES = (() => {
  const values = new Int8Array(128).fill(-1)
  for (let i = 0; i < BASE62.length; i++) values[BASE62.charCodeAt(i)] = i
  return values
})()

/**
 * Whether a bearer token takes the PAT path (SPEC §5.3 rule 7): it starts with exactly
 * lowercase `pat_`. `PAT_...` or `Pat_...` is not a PAT and goes to the JWT path, where it
 * fails as an invalid JWT; case-folding the prefix would make two spellings of one token.
 */
export function isPatToken(token: string): boolean {
  return token.startsWith(PAT_PREFIX)
}

/**
 * Lowercase hex SHA-256 of the whole token string, the PAT's lookup key.
 *
 * Why a hash: the store never holds a usable credential, so a leaked database or backup
 * cannot be replayed. Why plain SHA-256 and not a slow KDF: the token carries ~190 random
 * bits, so brute-forcing the hash is infeasible, and a fast, unsalted hash allows an indexed
 * lookup. Looking up by hash also avoids a timing-sensitive comparison of secrets: the
 * attacker-chosen input is hashed before it meets any stored value. One-shot `crypto.hash`:
 * no Hash object per call.
 */
export function hashPat(token: string): string {
  return hash('sha256', token, 'hex')
}

/** The last 4 characters, kept for display (`pat_…abcd`). They are checksum characters. */
export function patLast4(token: string): string {
  return token.slice(-4)
}

/** Where a PAT stands at a moment: what authentication, listings and the CLI all report. */
export type PatStatus = 'active' | 'grace' | 'rotated' | 'expired' | 'disabled' | 'revoked'

/**
 * The one rule for a PAT's status. Revoked wins; a rotated-out token is `rotated` once its
 * grace is over (checked before expiry: presenting it then is the reuse signal), else an
 * expired token is `expired`, else a disabled one `disabled` (it comes back when enabled),
 * else a rotated-out one still inside its grace is `grace`. Only `active` and `grace`
 * authenticate.
 */
export function patStatus(record: PatRecord, now: number): PatStatus {
  if (record.revokedAt !== null) return 'revoked'
  const rotated = record.supersededAt != null
  if (rotated && !(record.graceUntil != null && now < record.graceUntil)) return 'rotated'
  if (record.expiresAt !== null && record.expiresAt <= now) return 'expired'
  if (record.disabledAt != null) return 'disabled'
  return rotated ? 'grace' : 'active'
}

export interface IssuePatInput {
  readonly tenantId: string
  readonly subject: string
  readonly name: string
  readonly permissions: readonly string[]
  /** Epoch milliseconds, or null for a token that never expires. */
  readonly expiresAt: number | null
  /** Epoch milliseconds: the creation time. */
  readonly now: number
  /** Id of the PAT this one replaces by rotation. */
  readonly rotatedFrom?: string | null | undefined
}

/**
 * Creates a new PAT and the record to store for it. The plaintext `token` is returned once,
 * for the operator to hand over; only `record` (which holds its hash) may be persisted.
 *
 * Throws a `RangeError` for inputs that would be a programming error: an empty tenant or
 * subject, or an expiry that is not after `now`.
 *
 * @example
 * const { token, record } = issuePat({ tenantId: 't1', subject: 'ci', name: 'deploy',
 *   permissions: ['tokens:read'], expiresAt: now + 90 * DAY_MS, now })
 * await store.insertPat(record)
 */
export function issuePat(input: IssuePatInput): { token: string; record: PatRecord } {
  if (input.tenantId.length === 0) throw new RangeError('issuePat: tenantId must not be empty')
  if (input.subject.length === 0) throw new RangeError('issuePat: subject must not be empty')
  if (!Number.isFinite(input.now)) throw new RangeError('issuePat: now must be a finite time')
  if (input.expiresAt !== null && !(input.expiresAt > input.now)) {
    throw new RangeError('issuePat: expiresAt must be after now')
  }
  const token = generatePat()
  const record: PatRecord = Object.freeze({
    id: `tok_${randomBase62(20)}`,
    tokenHash: hashPat(token),
    tenantId: input.tenantId,
    subject: input.subject,
    name: input.name,
    permissions: Object.freeze([...input.permissions]),
    last4: patLast4(token),
    createdAt: input.now,
    expiresAt: input.expiresAt,
    revokedAt: null,
    lastUsedAt: null,
    rotatedFrom: input.rotatedFrom ?? null,
  })
  return { token, record }
}
