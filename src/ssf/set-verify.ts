/**
 * Verification of a Security Event Token (RFC 8417) from one configured transmitter, with the
 * answers RFC 8935 §2.4 gives a bad SET (`err` codes). Pure: the keys come through the same
 * key sources as trusted JWT issuers (core/jwks.ts: origin-bound, cached, no redirects), the
 * replay check and what the events mean are the receiver's (receiver.ts).
 *
 * Order of checks: shape and header first (nothing unsigned is believed, `alg: none` never
 * reaches a key), then `iss` (it only chooses whose keys to use), the signature, and only
 * then the claims, which are the transmitter's word once signed.
 */
import { Buffer } from 'node:buffer'
import { decodeBase64url, parseCompactJws } from '../core/jwt-jws.ts'
import { type IssuerKeys, isNoneAlgorithm } from '../core/jwt-keys.ts'
import type { Clock } from '../core/ports.ts'
import { SET_MEDIA_TYPE, SET_TYP } from './events.ts'

/** RFC 8935 §2.4 / RFC 8936 §2.4 error codes of a refused SET. */
export type SetErrorCode =
  | 'invalid_request'
  | 'invalid_key'
  | 'invalid_issuer'
  | 'invalid_audience'
  | 'authentication_failed'
  | 'access_denied'

export type SetRefusal = {
  readonly ok: false
  /** `unavailable`: the transmitter's keys cannot be had now; retry later (503, not a 400). */
  readonly err: SetErrorCode | 'unavailable'
  /** A fixed sentence; never echoes the SET. */
  readonly description: string
}

/** A SET whose signature and claims were checked. */
export interface VerifiedSet {
  readonly jti: string
  readonly iss: string
  /** Seconds since the epoch, as signed. */
  readonly iat: number
  /** The one event type (a key of `events`) and its claims. */
  readonly eventType: string
  readonly event: Readonly<Record<string, unknown>>
  /** The SSF `sub_id` claim (SSF 1.0 §3), when present. */
  readonly subId: unknown
  /** Every claim, as signed (for the interop fixtures and the log-safe fields). */
  readonly claims: Readonly<Record<string, unknown>>
}

export type SetVerification = { readonly ok: true; readonly set: VerifiedSet } | SetRefusal

export interface SetVerifierOptions {
  /** The transmitter's issuer: the SET's `iss` must be exactly this. */
  readonly issuer: string
  /** Our audience: the SET's `aud` must be or contain it. */
  readonly audience: string
  /** The transmitter's keys (its `jwks_uri`, through core/jwks.ts). */
  readonly keys: IssuerKeys
  /** Signature algorithms accepted; never `none`. */
  readonly algorithms: readonly string[]
  readonly clock: Clock
  /** Allowed clock difference for `iat` (seconds). */
  readonly clockToleranceSec: number
  /** A SET issued longer ago than this is refused (seconds). */
  readonly maxAgeSec: number
}

/** A SET is a few hundred bytes; a push body is capped before this (receiver-push.ts). */
const MAX_SET_LENGTH = 64 * 1024
const MAX_JTI_LENGTH = 256

const refuse = (err: SetRefusal['err'], description: string): SetRefusal => ({
  ok: false,
  err,
  description,
})

/** Returns the verifier of one transmitter's SETs. Never throws on a SET. */
export function createSetVerifier(
  options: SetVerifierOptions,
): (token: string) => Promise<SetVerification> {
  const algorithms = new Set(options.algorithms.filter((alg) => !isNoneAlgorithm(alg)))
  return async (token) => {
    if (typeof token !== 'string' || token.length === 0 || token.length > MAX_SET_LENGTH) {
      return refuse('invalid_request', 'the body is not a SET')
    }
    const parsed = parseCompactJws(token)
    if (!parsed.ok) return refuse('invalid_request', 'the SET is not a compact JWS')
    const { header, payload } = parsed.jws
    // RFC 8417 §2.3: `typ` tells a SET from an access or ID token signed with the same key,
    // so one cannot be replayed as the other.
    const typ = typeof header.typ === 'string' ? header.typ.toLowerCase() : undefined
    if (typ !== SET_TYP && typ !== SET_MEDIA_TYPE) {
      return refuse('invalid_request', 'the SET header has no typ secevent+jwt')
    }
    const { alg, kid } = header
    if (typeof alg !== 'string' || alg === '') {
      return refuse('invalid_request', 'the SET header has no alg')
    }
    // Unsigned SETs (RFC 8417 §5.2 allows them only inside a protected channel; a push
    // endpoint on the internet is not one): anyone could revoke anyone's sessions.
    if (isNoneAlgorithm(alg)) return refuse('invalid_request', 'unsigned SETs are not accepted')
    if (!algorithms.has(alg)) return refuse('invalid_key', 'the SET algorithm is not allowed')
    if (kid !== undefined && typeof kid !== 'string') {
      return refuse('invalid_request', 'the SET header kid is not a string')
    }
    if (header.crit !== undefined) {
      return refuse('invalid_request', 'the SET uses an unsupported JOSE feature')
    }
    if (payload.iss !== options.issuer) {
      return refuse('invalid_issuer', 'the SET issuer is not this stream’s transmitter')
    }
    const found = await options.keys.resolve(alg, kid)
    if (!found.ok) {
      return found.failure.code === 'unavailable'
        ? refuse('unavailable', 'the transmitter keys cannot be fetched now')
        : refuse('invalid_key', 'the SET signing key is not known')
    }
    const signature = decodeBase64url(parsed.jws.signature)
    if (
      signature === undefined ||
      !found.key.verify(Buffer.from(parsed.jws.signingInput, 'latin1'), signature)
    ) {
      return refuse('invalid_key', 'the SET signature is not valid')
    }
    return checkClaims(payload, options)
  }
}

function checkClaims(
  claims: Readonly<Record<string, unknown>>,
  options: SetVerifierOptions,
): SetVerification {
  const { aud, iat, jti, events, exp } = claims
  const audiences = typeof aud === 'string' ? [aud] : Array.isArray(aud) ? aud : []
  if (!audiences.includes(options.audience)) {
    return refuse('invalid_audience', 'the SET audience is not this receiver')
  }
  if (typeof jti !== 'string' || jti.length === 0 || jti.length > MAX_JTI_LENGTH) {
    return refuse('invalid_request', 'the SET has no valid jti')
  }
  const nowSec = options.clock.now() / 1000
  if (typeof iat !== 'number' || !Number.isFinite(iat)) {
    return refuse('invalid_request', 'the SET has no valid iat')
  }
  if (iat > nowSec + options.clockToleranceSec) {
    return refuse('invalid_request', 'the SET is issued in the future')
  }
  if (iat < nowSec - options.maxAgeSec - options.clockToleranceSec) {
    return refuse('invalid_request', 'the SET is too old')
  }
  // RFC 8417 §2.2: a SET should not carry `exp`; one that does and has passed is refused.
  if (exp !== undefined && (typeof exp !== 'number' || exp < nowSec - options.clockToleranceSec)) {
    return refuse('invalid_request', 'the SET has expired')
  }
  if (typeof events !== 'object' || events === null || Array.isArray(events)) {
    return refuse('invalid_request', 'the SET has no events claim')
  }
  // SSF 1.0 §4.1.8: one event per SET, its payload an object.
  const types = Object.keys(events)
  const eventType = types[0]
  const event = eventType === undefined ? undefined : (events as Record<string, unknown>)[eventType]
  if (types.length !== 1 || typeof event !== 'object' || event === null || Array.isArray(event)) {
    return refuse('invalid_request', 'the SET must carry exactly one event')
  }
  return {
    ok: true,
    set: {
      jti,
      iss: options.issuer,
      iat,
      eventType: eventType as string,
      event: event as Record<string, unknown>,
      subId: claims.sub_id,
      claims,
    },
  }
}
