/**
 * Verification keys, each bound to exactly one JWS algorithm.
 *
 * Every key tokengate trusts is imported once, up front, and bound to the one JWS `alg` it
 * may verify: a JWK's `alg`, the algorithm configured beside a PEM or a secret, or, for a JWK
 * without `alg`, each algorithm its key type fits that the issuer's allow-list names (one
 * bound key per algorithm; see `bindIssuerJwk`). Binding prepares two equivalent forms, both
 * fixed to that algorithm:
 * - `verify`, the node:crypto signature check the verifier uses (jwt-signature.ts), and
 * - `key`, a WebCrypto `CryptoKey` whose algorithm jose enforces (the reference path the
 *   differential test compares against).
 * Key selection below only ever offers the key bound to the token's `alg`, so:
 * - an RS256 key never verifies a PS256 or RS512 token, and
 * - a public key is never used as an HMAC secret (the classic RS256 → HS256 confusion):
 *   HMAC keys come only from an explicit `secret` key source, and public JWKs of type
 *   `oct` are refused.
 */
import { Buffer } from 'node:buffer'
import {
  createPublicKey,
  createSecretKey,
  type KeyObject,
  type JsonWebKey as NodeJwk,
} from 'node:crypto'
import type { AuthFailure } from './failure.ts'
import { createSignatureCheck, type SignatureCheck } from './jwt-signature.ts'

/** A verification key and the single algorithm it may be used with. */
export interface BoundKey {
  readonly kid: string | undefined
  readonly alg: string
  /** The prepared node:crypto check of a signature under `alg` with this key. */
  readonly verify: SignatureCheck
}

interface AsymmetricAlgorithm {
  /** `KeyObject.asymmetricKeyType` the key must have. */
  readonly keyType: 'rsa' | 'ec' | 'ed25519'
  /** `KeyObject.asymmetricKeyDetails.namedCurve` for EC keys. */
  readonly curve?: string
}

const rsa: AsymmetricAlgorithm = { keyType: 'rsa' }
const ec = (curve: string): AsymmetricAlgorithm => ({ keyType: 'ec', curve })
const ed25519: AsymmetricAlgorithm = { keyType: 'ed25519' }

const ASYMMETRIC: ReadonlyMap<string, AsymmetricAlgorithm> = new Map(
  Object.entries({
    RS256: rsa,
    RS384: rsa,
    RS512: rsa,
    PS256: rsa,
    PS384: rsa,
    PS512: rsa,
    ES256: ec('prime256v1'),
    ES384: ec('secp384r1'),
    ES512: ec('secp521r1'),
    EdDSA: ed25519,
    Ed25519: ed25519,
  }),
)

/**
 * HMAC algorithms and their minimum secret size. RFC 7518 §3.2: the key must be at least as
 * long as the hash output; a shorter secret is brute-forceable offline from one token.
 */
const HMAC: ReadonlyMap<string, { minBytes: number }> = new Map(
  Object.entries({
    HS256: { minBytes: 32 },
    HS384: { minBytes: 48 },
    HS512: { minBytes: 64 },
  }),
)

/** RSA keys below 2048 bits are refused (jose refuses them at verification too). */
const MIN_RSA_BITS = 2048

/** Every public-key JWS algorithm an issuer may use. */
export const ASYMMETRIC_ALGORITHMS: readonly string[] = Object.freeze([...ASYMMETRIC.keys()])
/** Shared-secret algorithms: only with an explicit secret key source. */
export const HMAC_ALGORITHMS: readonly string[] = Object.freeze([...HMAC.keys()])

export function isAsymmetricAlgorithm(alg: string): boolean {
  return ASYMMETRIC.get(alg) !== undefined
}

export function isHmacAlgorithm(alg: string): boolean {
  return HMAC.get(alg) !== undefined
}

/** True for `none` in any spelling (`None`, `NONE`, `nOnE`, ...). */
export function isNoneAlgorithm(alg: string): boolean {
  return alg.toLowerCase() === 'none'
}

/** Binds a public `KeyObject` to `alg`, checking that the key's type and curve fit it. */
function bindPublicKey(keyObject: KeyObject, alg: string, kid: string | undefined): BoundKey {
  const spec = ASYMMETRIC.get(alg)
  if (spec === undefined) {
    throw new Error(`algorithm ${alg} is not a supported public-key JWS algorithm`)
  }
  if (keyObject.type !== 'public') throw new Error('only public keys are accepted')
  if (keyObject.asymmetricKeyType !== spec.keyType) {
    throw new Error(`a ${keyObject.asymmetricKeyType} key cannot be used with ${alg}`)
  }
  const details = keyObject.asymmetricKeyDetails
  if (spec.curve !== undefined && details?.namedCurve !== spec.curve) {
    throw new Error(`the key's curve does not match ${alg}`)
  }
  if (spec.keyType === 'rsa' && (details?.modulusLength ?? 0) < MIN_RSA_BITS) {
    throw new Error(`RSA keys must have at least ${MIN_RSA_BITS} bits`)
  }
  return Object.freeze({ kid, alg, verify: createSignatureCheck(alg, keyObject) })
}

/** Why a JWK cannot be used; shown in readiness reports and logs (never with key material). */
export type JwkRefusalReason =
  /** Marked for encryption (`use: enc`, or `key_ops` without `verify`): not a signing key. */
  | 'not_for_signing'
  /** The key may verify no algorithm on the issuer's allow-list. */
  | 'algorithm_not_allowed'
  /** A key type, curve or `alg` tokengate does not verify with (`oct`, RSA-OAEP, secp256k1). */
  | 'unsupported_key'
  /** Broken or unsafe material: not a valid public key, private parts, RSA < 2048 bits. */
  | 'invalid_key'

/** A JWK refused by {@link bindJwk} or {@link bindIssuerJwk}; the message is config-safe. */
export class JwkRefused extends Error {
  override readonly name = 'JwkRefused'
  readonly reason: JwkRefusalReason
  constructor(reason: JwkRefusalReason, message: string) {
    super(message)
    this.reason = reason
  }
}

const RSA_ALGORITHMS: readonly string[] = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512']

/**
 * The algorithms a JWK that has no `alg` may verify, before any allow-list.
 *
 * Why not "any algorithm of its key type": the token would then choose, and whoever forges
 * a token picks the weakest. OKP/Ed25519 admits only EdDSA and each EC curve only one ECDSA
 * algorithm, so those are derived. An RSA key fits RS256..PS512: it gets them all here, and
 * {@link bindIssuerJwk} keeps only the ones the operator allowed for the issuer (RFC 7517
 * §4.4 makes `alg` optional; oidc-provider and Microsoft Entra ID omit it on RSA keys).
 */
function jwkAlgorithms(jwk: Record<string, unknown>): readonly string[] {
  if (jwk.kty === 'RSA') return RSA_ALGORITHMS
  if (jwk.kty === 'OKP' && jwk.crv === 'Ed25519') return ['EdDSA']
  if (jwk.kty === 'EC') {
    if (jwk.crv === 'P-256') return ['ES256']
    if (jwk.crv === 'P-384') return ['ES384']
    if (jwk.crv === 'P-521') return ['ES512']
  }
  return []
}

/**
 * Checks everything about a JWK that does not depend on an algorithm, and imports it.
 * Returns the key, its `kid`, and the algorithms it may verify before any allow-list.
 */
function readJwk(jwk: Record<string, unknown>): {
  keyObject: KeyObject
  kid: string | undefined
  algorithms: readonly string[]
} {
  if (jwk === null || typeof jwk !== 'object' || Array.isArray(jwk)) {
    throw new JwkRefused('invalid_key', 'a JWK must be an object')
  }
  if (jwk.kid !== undefined && typeof jwk.kid !== 'string') {
    throw new JwkRefused('invalid_key', '"kid" must be a string')
  }
  if (
    (jwk.use !== undefined && jwk.use !== 'sig') ||
    (jwk.key_ops !== undefined && !Array.isArray(jwk.key_ops))
  ) {
    throw new JwkRefused('not_for_signing', '"use" must be "sig" when present')
  }
  if (Array.isArray(jwk.key_ops) && !jwk.key_ops.includes('verify')) {
    throw new JwkRefused('not_for_signing', '"key_ops" must include "verify" when present')
  }
  if (jwk.kty === 'oct') {
    throw new JwkRefused('unsupported_key', 'symmetric (oct) keys are not accepted in a JWKS')
  }
  if (jwk.d !== undefined || jwk.p !== undefined || jwk.priv !== undefined) {
    throw new JwkRefused('invalid_key', 'private key material is not accepted in a JWKS')
  }
  let algorithms = jwkAlgorithms(jwk)
  if (jwk.alg !== undefined) {
    const alg = jwk.alg
    if (typeof alg !== 'string' || !isAsymmetricAlgorithm(alg)) {
      // Not echoed when unknown: the value comes from the network and ends up in logs.
      const named = typeof alg === 'string' && (isNoneAlgorithm(alg) || isHmacAlgorithm(alg))
      throw new JwkRefused(
        'unsupported_key',
        named ? `"alg" ${alg} is not accepted` : 'its "alg" is not a supported signature algorithm',
      )
    }
    // Whether it fits the key (type, curve, size) is checked when binding.
    algorithms = [alg]
  }
  if (algorithms.length === 0) {
    throw new JwkRefused('unsupported_key', 'its key type or curve is not supported')
  }
  const { alg: _alg, use: _use, key_ops: _ops, ...material } = jwk
  let keyObject: KeyObject
  try {
    keyObject = createPublicKey({ key: material as NodeJwk, format: 'jwk' })
  } catch {
    throw new JwkRefused('invalid_key', 'the JWK is not a valid public key')
  }
  return { keyObject, kid: jwk.kid as string | undefined, algorithms }
}

/** {@link bindPublicKey}, its refusal typed as an invalid key. */
function bindReadKey(keyObject: KeyObject, alg: string, kid: string | undefined): BoundKey {
  try {
    return bindPublicKey(keyObject, alg, kid)
  } catch (error) {
    throw new JwkRefused('invalid_key', (error as Error).message)
  }
}

/**
 * Binds one public JWK to its one algorithm, where the key names it or admits only one (EC,
 * Ed25519). Throws {@link JwkRefused} when the JWK is not a usable public signature key:
 * private material, `kty: oct`, `use` other than `sig`, `key_ops` without `verify`, an `alg`
 * that does not fit the key, or an RSA key without `alg` (it fits several algorithms: bind
 * it under an issuer's allow-list with {@link bindIssuerJwk}).
 */
export function bindJwk(jwk: Record<string, unknown>): BoundKey {
  const { keyObject, kid, algorithms } = readJwk(jwk)
  const [alg, ...others] = algorithms
  if (alg === undefined || others.length > 0) {
    throw new JwkRefused(
      'algorithm_not_allowed',
      '"alg" is required on this JWK without an algorithm allow-list (only Ed25519 and EC keys may omit it)',
    )
  }
  return bindReadKey(keyObject, alg, kid)
}

/**
 * Binds one public JWK of an issuer under that issuer's algorithm allow-list: one
 * {@link BoundKey} (same `kid`) per allowed algorithm the key may verify. A key with `alg`
 * gets that algorithm only; an RSA key without `alg` gets each allowed RSxxx and PSxxx algorithm; EC
 * and Ed25519 keys their one algorithm. Throws {@link JwkRefused} when none is allowed or the
 * key is unusable.
 *
 * Why this is safe although the token names the algorithm: the token's `alg` only picks
 * among keys bound here, each to one algorithm its key type fits AND the operator allowed, so
 * a token can never make a key verify under an algorithm nobody allowed (an RS256 key as an
 * HMAC secret, an EC key under another curve's algorithm). Using one RSA key for both
 * PKCS#1 v1.5 and PSS verification is what the operator's allow-list permits; neither
 * verification weakens the other.
 */
export function bindIssuerJwk(
  jwk: Record<string, unknown>,
  allowed: readonly string[],
): readonly BoundKey[] {
  const { keyObject, kid, algorithms } = readJwk(jwk)
  const usable = algorithms.filter((alg) => allowed.includes(alg))
  if (usable.length === 0) {
    throw new JwkRefused(
      'algorithm_not_allowed',
      jwk.alg === undefined
        ? `none of the algorithms a key of this type may verify (${algorithms.join(', ')}) is on the issuer's allow-list`
        : `the key's "alg" ${algorithms[0]} is not on the issuer's allow-list`,
    )
  }
  return usable.map((alg) => bindReadKey(keyObject, alg, kid))
}

/** Binds an SPKI PEM public key to the one configured algorithm. */
export function bindPem(pem: string, alg: string, kid: string | undefined): BoundKey {
  let keyObject: KeyObject
  try {
    keyObject = createPublicKey({ key: pem, format: 'pem', type: 'spki' })
  } catch {
    throw new Error('the PEM is not a valid SPKI public key')
  }
  return bindPublicKey(keyObject, alg, kid)
}

const BASE64URL = /^[A-Za-z0-9_-]+$/

/**
 * Binds a base64url shared secret to one HMAC algorithm. Only HS256/384/512 are accepted,
 * and the secret must be at least as long as the hash output.
 */
export function bindSecret(secret: string, alg: string): BoundKey {
  const spec = HMAC.get(alg)
  if (spec === undefined) {
    throw new Error('a shared secret can only be used with HS256, HS384 or HS512')
  }
  if (!BASE64URL.test(secret)) throw new Error('the secret must be base64url (no padding)')
  const bytes = Buffer.from(secret, 'base64url')
  if (bytes.length < spec.minBytes) {
    throw new Error(`an ${alg} secret must be at least ${spec.minBytes} bytes`)
  }
  const secretKey = createSecretKey(bytes)
  return Object.freeze({ kid: undefined, alg, verify: createSignatureCheck(alg, secretKey) })
}

/**
 * A shared-secret key source from a secret file's bytes: the bytes as they are, less one
 * trailing newline (an editor's or `echo`'s, never part of the secret), checked by
 * {@link bindSecret}. The CLI's `--secret-file` and library code both use it, so a file gives
 * the same key everywhere.
 *
 * @example
 * secretKeySource(readFileSync('secret.bin'), 'HS256')
 */
export function secretKeySource(
  bytes: Uint8Array,
  algorithm: string,
): { readonly kind: 'secret'; readonly secret: string; readonly algorithm: string } {
  let end = bytes.length
  if (bytes[end - 1] === 0x0a) end--
  if (bytes[end - 1] === 0x0d) end--
  const secret = Buffer.from(bytes.buffer, bytes.byteOffset, end).toString('base64url')
  try {
    bindSecret(secret, algorithm)
  } catch (error) {
    throw new Error(`${(error as Error).message}; this one has ${end} bytes`)
  }
  return Object.freeze({ kind: 'secret', secret, algorithm })
}

/** Outcome of choosing a key for a token's `alg` and `kid`. */
export type KeySelection =
  | { readonly ok: true; readonly key: BoundKey }
  | { readonly ok: false; readonly reason: 'unknown_key' | 'algorithm_not_allowed' | 'ambiguous' }

/**
 * Picks the one key for `alg` (and `kid`, when the token names one). A `kid` that names no
 * key is `unknown_key`; a known `kid` bound to another algorithm is `algorithm_not_allowed`;
 * no `kid` and several keys for `alg` is `ambiguous` (we do not try keys one by one: that
 * multiplies the signature work an anonymous caller can cause).
 */
export function selectKey(
  keys: readonly BoundKey[],
  alg: string,
  kid: string | undefined,
): KeySelection {
  let named = 0
  let found: BoundKey | undefined
  let matches = 0
  for (const key of keys) {
    if (kid !== undefined && key.kid !== kid) continue
    named++
    if (key.alg !== alg) continue
    matches++
    found = key
  }
  if (named === 0) return { ok: false, reason: 'unknown_key' }
  if (found === undefined) return { ok: false, reason: 'algorithm_not_allowed' }
  if (matches > 1) return { ok: false, reason: 'ambiguous' }
  return { ok: true, key: found }
}

/**
 * How long a token verified with a key may be served from the verified-token cache
 * (jwt-cache.ts), kept current by the key's remote source. Epoch ms.
 *
 * Until `recheckAtMs` (the instant the source is due to read its key set again) a hit costs
 * one comparison. From then until `validUntilMs` (the end of the keys' usable life) a hit is
 * still served but calls `recheck`, which reads the key set in the background: cached tokens
 * never wait on the identity provider, as before. A read that no longer publishes the key
 * (withdrawn) sets both to 0: from then on its tokens are verified afresh and refused, not
 * served from the cache until their `exp`.
 */
export interface KeyValidity {
  recheckAtMs: number
  validUntilMs: number
  /** Starts a background read of the key set if one is due; returns at once. */
  recheck(): void
}

/** The result of looking up the key for one token. */
export type KeyLookup =
  | {
      readonly ok: true
      readonly key: BoundKey
      /** Absent for keys known at configuration time: they change only with the issuer. */
      readonly validity?: KeyValidity
    }
  | { readonly ok: false; readonly failure: AuthFailure }

/** Where one issuer's verification keys come from: inline, PEM, secret, or a remote JWKS. */
export interface IssuerKeys {
  /**
   * Finds the key for a token's `alg` and `kid`. Never throws: failures are values. Keys
   * known at configuration time answer synchronously (no promise on the hot path); a remote
   * JWKS may have to fetch and answers with a promise.
   *
   * `signedBeforeMs` (epoch ms, this clock) is an instant the token was certainly signed
   * before: when it arrived, or earlier per its unverified `iat` (see `signedBeforeMs` in
   * jwt.ts). A remote JWKS uses it to tell a `kid` that is really unknown from one published
   * after its last fetch; static keys ignore it. Omitted, the time of the call is used.
   */
  resolve(
    alg: string,
    kid: string | undefined,
    signedBeforeMs?: number,
  ): KeyLookup | Promise<KeyLookup>
  close(): void
}

/**
 * Turns a failed key selection into the `invalid_token` failure a client sees.
 * `unusable_key`: the issuer publishes the token's key, but it was skipped (jwks.ts);
 * `withdrawn_key`: an earlier key set read published it, a later one no longer does.
 */
export function selectionFailure(
  reason: 'unknown_key' | 'algorithm_not_allowed' | 'ambiguous' | 'unusable_key' | 'withdrawn_key',
): AuthFailure {
  switch (reason) {
    case 'withdrawn_key':
      return {
        code: 'invalid_token',
        reason: 'withdrawn_key',
        detail: 'the signing key has been withdrawn by its issuer',
      }
    case 'unusable_key':
      return {
        code: 'invalid_token',
        reason: 'unusable_key',
        detail:
          'the issuer publishes the signing key, but it cannot be used with the allowed algorithms',
      }
    case 'unknown_key':
      return {
        code: 'invalid_token',
        reason: 'unknown_key',
        detail: 'the signing key is not known',
      }
    case 'ambiguous':
      return {
        code: 'invalid_token',
        reason: 'unknown_key',
        detail: 'the token names no key id and the issuer has several keys',
      }
    case 'algorithm_not_allowed':
      return {
        code: 'invalid_token',
        reason: 'algorithm_not_allowed',
        detail: 'the signing key is not bound to the token algorithm',
      }
    default:
      return reason satisfies never
  }
}

/**
 * Keys known at configuration time. `ignoreKid` is for a single PEM or secret configured
 * without a key id: the token's `kid` is then irrelevant, as there is only one key.
 */
export function createStaticKeys(keys: readonly BoundKey[], ignoreKid: boolean): IssuerKeys {
  return {
    resolve(alg, kid) {
      const selection = selectKey(keys, alg, ignoreKid ? undefined : kid)
      return selection.ok ? selection : { ok: false, failure: selectionFailure(selection.reason) }
    },
    close() {},
  }
}
