/**
 * Strict parsing of a compact JWS (RFC 7515 §7.1): `header.payload.signature`, each segment
 * base64url without padding, the header and payload UTF-8 JSON objects.
 *
 * Stricter than jose on purpose, in one respect: a segment must be the canonical base64url
 * encoding of its bytes (alphabet `A-Z a-z 0-9 - _` only, no `=` padding, no whitespace, zero
 * bits after the last byte). jose (on Node 24, through `atob`) also accepts padding,
 * whitespace and non-zero trailing bits. Why refuse them: they let one signed token be
 * written many ways, which helps nobody but someone probing caches, logs or replay lists
 * keyed by the token string. test/core/jwt-differential.test.ts pins this as the only
 * encoding difference.
 *
 * JSON: the text must be well-formed UTF-8 (the same fatal decoder as jose, which also drops
 * a leading BOM) and parse with `JSON.parse` to a plain object. Duplicate member names are
 * not detected: like jose and every JSON.parse-based library, the last occurrence wins. That
 * is harmless here because the signature covers the encoded bytes, so only the issuer could
 * have written a duplicate, and we read the same (last) value the reference does.
 */
import { Buffer } from 'node:buffer'

/** A compact JWS split and decoded, signature not yet checked. */
export interface ParsedJws {
  readonly header: Readonly<Record<string, unknown>>
  readonly payload: Readonly<Record<string, unknown>>
  /** `header.payload` as sent: the bytes the signature covers (ASCII). */
  readonly signingInput: string
  /** The third segment, still encoded. */
  readonly signature: string
}

export type JwsParse =
  | { readonly ok: true; readonly jws: ParsedJws }
  | { readonly ok: false; readonly detail: string }

const BASE64URL = /^[A-Za-z0-9_-]*$/
const strictUtf8 = new TextDecoder('utf-8', { fatal: true })

/** The value of each base64url character, -1 for anything else (ASCII only). */
const VALUES = (() => {
  const table = new Int8Array(128).fill(-1)
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
  for (let i = 0; i < alphabet.length; i++) table[alphabet.charCodeAt(i)] = i
  return table
})()

/**
 * Decodes canonical unpadded base64url; undefined for anything else (see the module note).
 */
export function decodeBase64url(segment: string): Buffer | undefined {
  const rest = segment.length % 4
  if (rest === 1 || !BASE64URL.test(segment)) return undefined
  if (rest !== 0) {
    // The last character carries 4 (rest 2) or 2 (rest 3) bits beyond the last byte: they
    // must be zero, or two strings would decode to the same bytes.
    const last = VALUES[segment.charCodeAt(segment.length - 1)] as number
    if ((last & (rest === 2 ? 0x0f : 0x03)) !== 0) return undefined
  }
  return Buffer.from(segment, 'base64url')
}

function decodeJsonObject(segment: string): Record<string, unknown> | undefined {
  const bytes = decodeBase64url(segment)
  if (bytes === undefined) return undefined
  let value: unknown
  try {
    value = JSON.parse(strictUtf8.decode(bytes))
  } catch {
    return undefined
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined
  return value as Record<string, unknown>
}

/**
 * Splits and decodes a compact JWS. Five segments (a JWE) and any other count get their own
 * details; the signature segment is only split off here, and decoded by the caller once the
 * key is known.
 */
export function parseCompactJws(token: string): JwsParse {
  const first = token.indexOf('.')
  const second = first === -1 ? -1 : token.indexOf('.', first + 1)
  if (second === -1 || token.indexOf('.', second + 1) !== -1) {
    // Only compact JWS: a JWE (5 segments) or a JSON serialization is not an access token.
    const segments = token.split('.').length
    return {
      ok: false,
      detail:
        segments === 5
          ? 'encrypted tokens (JWE) are not accepted'
          : 'the token is not a compact JWS',
    }
  }
  const header = decodeJsonObject(token.slice(0, first))
  const payload = header && decodeJsonObject(token.slice(first + 1, second))
  if (header === undefined || payload === undefined) {
    return { ok: false, detail: 'the token is not a well-formed JWT' }
  }
  return {
    ok: true,
    jws: {
      header,
      payload,
      signingInput: token.slice(0, second),
      signature: token.slice(second + 1),
    },
  }
}
