import type { FastifyRequest } from 'fastify'
import { hashPat, isPatToken } from '../core/pat.ts'
import type { PatHashHint } from '../core/raw-headers.ts'

const PAT_HASH = Symbol('tokengate.patHash')

declare module 'fastify' {
  interface FastifyRequest {
    /** `null`: computed, and the request carries no `Bearer pat_…` credential. */
    [PAT_HASH]?: PatHashHint | null
  }
}

/**
 * The request's PAT and its `hashPat` digest, computed at most once per request and shared
 * by the rate limiter (its known-credentials key) and authentication (the store lookup key).
 * Why: SHA-256 of the token was done twice per PAT request, once by each.
 *
 * Only an `Authorization` value of exactly `Bearer pat_…` qualifies; anything else returns
 * `undefined` and the callers fall back to their own digests. Read from `request.headers`
 * (Node keeps the first of duplicated lines): the core uses the hint only for the identical
 * token it parsed from the raw headers, so a mismatch costs a second hash, never a wrong
 * lookup. Only the digest outlives the request, as before; the token stays on the request.
 */
export function patHashOf(request: FastifyRequest): PatHashHint | undefined {
  const memo = request[PAT_HASH]
  if (memo !== undefined) return memo ?? undefined
  const authorization = request.headers.authorization
  let hint: PatHashHint | null = null
  if (authorization?.startsWith(BEARER_PREFIX)) {
    const token = authorization.slice(BEARER_PREFIX.length)
    if (isPatToken(token)) hint = { token, hash: hashPat(token) }
  }
  request[PAT_HASH] = hint
  return hint ?? undefined
}

const BEARER_PREFIX = 'Bearer '
