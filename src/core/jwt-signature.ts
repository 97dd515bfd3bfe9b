/**
 * Signature checks on node:crypto, one prepared function per bound key.
 *
 * Synchronous node:crypto, not WebCrypto: a verification then needs no promise, so a request
 * whose key is known is decided in the same tick. Every option object is built once, here,
 * never per request.
 *
 * The check is fixed to exactly one JWS algorithm when the key is bound (jwt-keys.ts), so the
 * token's `alg` only ever selects a key; it never chooses how that key is used.
 */
import { Buffer } from 'node:buffer'
import {
  constants,
  createHmac,
  type KeyObject,
  timingSafeEqual,
  verify as verifySignature,
} from 'node:crypto'

/**
 * Checks one signature over the JWS signing input (`header.payload`, ASCII bytes). Returns
 * false for a wrong signature of any shape (length, encoding); never throws.
 */
export type SignatureCheck = (signingInput: Buffer, signature: Buffer) => boolean

/** Byte length of one ECDSA coordinate (r or s) per curve size, RFC 7518 §3.4. */
const EC_COORDINATE_BYTES: Readonly<Record<string, number>> = { 256: 32, 384: 48, 512: 66 }

/**
 * Prepares the signature check for `key` under `alg`. `key` must already have been checked
 * to fit `alg` (type, curve, size): that is jwt-keys.ts's job.
 */
export function createSignatureCheck(alg: string, key: KeyObject): SignatureCheck {
  const bits = alg.slice(2)
  const hash = `sha${bits}`
  switch (alg) {
    case 'RS256':
    case 'RS384':
    case 'RS512':
      return guarded((data, signature) => verifySignature(hash, data, key, signature))
    case 'PS256':
    case 'PS384':
    case 'PS512': {
      // RFC 7518 §3.5: MGF1 with the same hash, salt length equal to the hash output length
      // (what WebCrypto and jose use). A signature with any other salt length fails.
      const options = {
        key,
        padding: constants.RSA_PKCS1_PSS_PADDING,
        saltLength: Number(bits) / 8,
      }
      return guarded((data, signature) => verifySignature(hash, data, options, signature))
    }
    case 'ES256':
    case 'ES384':
    case 'ES512': {
      const size = EC_COORDINATE_BYTES[bits] as number
      // JWS carries ECDSA signatures as r || s (IEEE P1363). Converting them to DER here and
      // passing the bare KeyObject is ~1.6× faster than `{ key, dsaEncoding: 'ieee-p1363' }`,
      // which Node converts the same way internally.
      return guarded((data, signature) => {
        if (signature.length !== size * 2) return false
        return verifySignature(hash, data, key, p1363ToDer(signature, size))
      })
    }
    case 'EdDSA':
    case 'Ed25519':
      return guarded((data, signature) => verifySignature(null, data, key, signature))
    case 'HS256':
    case 'HS384':
    case 'HS512':
      // Why timingSafeEqual: a byte-by-byte comparison that stops at the first difference
      // lets a caller learn a valid MAC for chosen claims one byte at a time.
      return guarded((data, signature) => {
        const expected = createHmac(hash, key).update(data).digest()
        return signature.length === expected.length && timingSafeEqual(expected, signature)
      })
    default:
      throw new Error(`unsupported JWS algorithm ${alg}`)
  }
}

function guarded(check: SignatureCheck): SignatureCheck {
  return (data, signature) => {
    try {
      return check(data, signature)
    } catch {
      // OpenSSL refuses some malformed signatures by throwing rather than returning false.
      return false
    }
  }
}

/**
 * IEEE P1363 `r || s` (each `size` bytes, big-endian) to the DER `SEQUENCE { INTEGER r,
 * INTEGER s }` OpenSSL verifies: minimal integers, a 0x00 byte before a set high bit.
 */
export function p1363ToDer(signature: Buffer, size: number): Buffer {
  const r = derInteger(signature, 0, size)
  const s = derInteger(signature, size, size * 2)
  const content = r.length + s.length
  const header = content < 0x80 ? 2 : 3
  const out = Buffer.allocUnsafe(header + content)
  out[0] = 0x30
  if (header === 2) {
    out[1] = content
  } else {
    out[1] = 0x81
    out[2] = content
  }
  r.copy(out, header)
  s.copy(out, header + r.length)
  return out
}

function derInteger(bytes: Buffer, start: number, end: number): Buffer {
  let first = start
  while (first < end - 1 && bytes[first] === 0) first++
  const pad = ((bytes[first] as number) & 0x80) !== 0 ? 1 : 0
  const length = end - first + pad
  const out = Buffer.allocUnsafe(2 + length)
  out[0] = 0x02
  out[1] = length
  if (pad === 1) out[2] = 0
  bytes.copy(out, 2 + pad, first, end)
  return out
}
