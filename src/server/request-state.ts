import { hash } from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import type { TokenDigest } from '../core/raw-headers.ts'

/**
 * What the pipeline learns about one request, in one object: each hook that needs a fact
 * computes it at most once and the later ones (limits, authentication, metrics) read it.
 * `principal` and `authFailure` stay request decorations: they are the plugin's public API.
 */
export interface RequestState {
  /** The bearer token and its SHA-256 (tokenDigestOf); null: no `Bearer <token>` credential. */
  tokenDigest: TokenDigest | null | undefined
  /** The credential's digest for the known-credentials set (rate-limit.ts). */
  credentialDigest: string | undefined
  /** The client address's failed-authentication key (IPv6 per /64). */
  addressKey: string | undefined
  /** The rate-limit policy that answered 429. */
  refusedBy: string | undefined
}

const STATE = Symbol('tokengate.requestState')

declare module 'fastify' {
  interface FastifyRequest {
    [STATE]?: RequestState
  }
}

/** The request's state, created on first use. */
export function stateOf(request: FastifyRequest): RequestState {
  let state = request[STATE]
  if (state === undefined) {
    state = {
      tokenDigest: undefined,
      credentialDigest: undefined,
      addressKey: undefined,
      refusedBy: undefined,
    }
    request[STATE] = state
  }
  return state
}

/**
 * The request's bearer token and its SHA-256 (hex), computed at most once per request and
 * shared by the rate limiter (its known-credentials key), authentication (a PAT's store key,
 * `hashPat`; a JWT's verified-token cache key) and the audit fingerprint of a malformed token.
 * Why: the token was hashed twice per request, once by the limiter and once by the core.
 *
 * Only an `Authorization` value of the form `Bearer <token>` qualifies; anything else returns
 * `undefined` and the callers fall back to their own digests. Read from `request.headers`
 * (Node keeps the first of duplicated lines): the core uses the hint only for the identical
 * token it parsed from the raw headers, so a mismatch costs a second hash, never a wrong
 * lookup. Only the digest outlives the request; the token stays on the request.
 */
export function tokenDigestOf(request: FastifyRequest): TokenDigest | undefined {
  const state = stateOf(request)
  const memo = state.tokenDigest
  if (memo !== undefined) return memo ?? undefined
  const authorization = request.headers.authorization
  let digest: TokenDigest | null = null
  if (authorization?.startsWith(BEARER_PREFIX) && authorization.length > BEARER_PREFIX.length) {
    const token = authorization.slice(BEARER_PREFIX.length)
    // The same digest as hashPat(token): one-shot SHA-256 of the UTF-8 token, lowercase hex.
    digest = { token, sha256Hex: hash('sha256', token, 'hex') }
  }
  state.tokenDigest = digest
  return digest ?? undefined
}

const BEARER_PREFIX = 'Bearer '
