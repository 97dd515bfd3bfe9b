import type { FastifyRequest } from 'fastify'
import type { TokenDigest } from '../core/raw-headers.ts'

/**
 * What the pipeline learns about one request, in one object: each hook that needs a fact
 * computes it at most once and the later ones (limits, authentication, metrics) read it.
 * `principal` and `authFailure` stay request decorations: they are the plugin's public API.
 */
export interface RequestState {
  /** The bearer token and its SHA-256 (token-digest.ts); null: no `Bearer <token>` credential. */
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
