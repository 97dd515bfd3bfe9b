/**
 * The console as an OpenID Connect relying party (authorization code flow with PKCE S256):
 * the provider's discovery document, the authorization URL, the code exchange at the token
 * endpoint, the end-session URL, and the pending sign-in (state, nonce, PKCE verifier) as it
 * travels in its cookie. No routes and no pages: console-sso.ts has those.
 */
import { Buffer } from 'node:buffer'
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import type { Config } from '../config/schema.ts'
import { checkJwksUrl, discoveryUrl } from '../core/jwks.ts'

type OidcConfig = NonNullable<Config['admin']['oidc']>

/** How long a started sign-in may take at the identity provider. */
export const PENDING_SIGN_IN_MS = 600_000
/** How long a discovery document is used before it is read again. */
const DISCOVERY_MAX_AGE_MS = 300_000

/** A sign-in this browser started: what the provider's answer must match. */
export interface PendingSignIn {
  readonly state: string
  readonly nonce: string
  readonly verifier: string
  /** Epoch ms. */
  readonly expiresAt: number
}

export function newPendingSignIn(now: number): PendingSignIn {
  const random = () => randomBytes(32).toString('base64url')
  return {
    state: random(),
    nonce: random(),
    verifier: random(),
    expiresAt: now + PENDING_SIGN_IN_MS,
  }
}

/** The cookie value: base64url parts and a number, joined by dots (none of them has one). */
export function encodePendingSignIn(pending: PendingSignIn): string {
  return [pending.state, pending.nonce, pending.verifier, pending.expiresAt].join('.')
}

export function decodePendingSignIn(value: string): PendingSignIn | undefined {
  const [state, nonce, verifier, expires, extra] = value.split('.')
  if (!state || !nonce || !verifier || !expires || extra !== undefined) return undefined
  const expiresAt = Number(expires)
  return Number.isFinite(expiresAt) ? { state, nonce, verifier, expiresAt } : undefined
}

/** Constant-time equality of a value from the request with one we made. */
export function sameSecret(given: unknown, expected: string): boolean {
  if (typeof given !== 'string') return false
  const a = Buffer.from(given)
  const b = Buffer.from(expected)
  return a.length === b.length && timingSafeEqual(a, b)
}

interface ProviderMetadata {
  readonly authorizationEndpoint: URL
  readonly tokenEndpoint: URL
  readonly endSessionEndpoint: URL | undefined
}

export type CodeExchange =
  | { readonly ok: true; readonly idToken: string | undefined }
  /** The token endpoint's refusal: its status and (bounded) `error` code. */
  | { readonly ok: false; readonly status: number; readonly error: string }

export interface OidcClient {
  authorizationUrl(redirectUri: string, pending: PendingSignIn): Promise<string>
  /** Throws when the provider cannot be reached or answers with something else than JSON. */
  exchangeCode(code: string, redirectUri: string, verifier: string): Promise<CodeExchange>
  /** Undefined when the provider has no end-session endpoint (or cannot be reached). */
  endSessionUrl(postLogoutRedirectUri: string): Promise<string | undefined>
}

/**
 * A relying party of `oidc.issuer` with `oidc.clientId`. The discovery document is read when
 * first needed and again after five minutes; its `issuer` must be exactly the configured one
 * (OpenID Connect Discovery §4.3), every endpoint https (http on loopback only, as for JWKS
 * URLs), and PKCE S256 supported when it lists methods (no downgrade to `plain`).
 */
export function createOidcClient(
  oidc: OidcConfig & { readonly clientId: string },
  options: { readonly timeoutMs: number; readonly now: () => number },
): OidcClient {
  let cached: { metadata: ProviderMetadata; at: number } | undefined
  const request = (url: URL, init: RequestInit = {}) =>
    fetch(url, { ...init, redirect: 'error', signal: AbortSignal.timeout(options.timeoutMs) })

  async function discover(): Promise<ProviderMetadata> {
    if (cached && options.now() - cached.at < DISCOVERY_MAX_AGE_MS) return cached.metadata
    const response = await request(discoveryUrl(oidc.issuer), {
      headers: { accept: 'application/json' },
    })
    if (!response.ok) throw new Error(`the discovery document answered ${response.status}`)
    const document = (await response.json()) as Record<string, unknown>
    if (document.issuer !== oidc.issuer) {
      throw new Error('the discovery document names another issuer')
    }
    const methods = document.code_challenge_methods_supported
    if (Array.isArray(methods) && !methods.includes('S256')) {
      throw new Error('the identity provider does not support PKCE with S256')
    }
    const endpoint = (value: unknown, name: string): URL => {
      if (typeof value !== 'string') throw new Error(`the discovery document has no ${name}`)
      return checkJwksUrl(value)
    }
    const metadata: ProviderMetadata = {
      authorizationEndpoint: endpoint(document.authorization_endpoint, 'authorization_endpoint'),
      tokenEndpoint: endpoint(document.token_endpoint, 'token_endpoint'),
      endSessionEndpoint:
        document.end_session_endpoint === undefined
          ? undefined
          : endpoint(document.end_session_endpoint, 'end_session_endpoint'),
    }
    cached = { metadata, at: options.now() }
    return metadata
  }

  return {
    async authorizationUrl(redirectUri, pending) {
      const target = new URL((await discover()).authorizationEndpoint)
      const parameters = {
        response_type: 'code',
        client_id: oidc.clientId,
        redirect_uri: redirectUri,
        scope: [...new Set(['openid', ...oidc.scopes])].join(' '),
        state: pending.state,
        nonce: pending.nonce,
        code_challenge: createHash('sha256').update(pending.verifier).digest('base64url'),
        code_challenge_method: 'S256',
      }
      for (const [name, value] of Object.entries(parameters)) target.searchParams.set(name, value)
      return target.href
    },

    async exchangeCode(code, redirectUri, verifier) {
      const body = new URLSearchParams({
        grant_type: 'authorization_code',
        code,
        redirect_uri: redirectUri,
        code_verifier: verifier,
      })
      const headers: Record<string, string> = {
        accept: 'application/json',
        'content-type': 'application/x-www-form-urlencoded',
      }
      if (oidc.clientSecret === undefined) body.set('client_id', oidc.clientId)
      else {
        // RFC 6749 §2.3.1: both parts form-encoded before Basic.
        const basic = `${encodeURIComponent(oidc.clientId)}:${encodeURIComponent(oidc.clientSecret)}`
        headers.authorization = `Basic ${Buffer.from(basic).toString('base64')}`
      }
      const response = await request((await discover()).tokenEndpoint, {
        method: 'POST',
        headers,
        body,
      })
      const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>
      if (!response.ok) {
        const error = typeof answer.error === 'string' ? answer.error.slice(0, 64) : 'error'
        return { ok: false, status: response.status, error }
      }
      return {
        ok: true,
        idToken: typeof answer.id_token === 'string' ? answer.id_token : undefined,
      }
    },

    async endSessionUrl(postLogoutRedirectUri) {
      const metadata = await discover().catch(() => undefined)
      if (!metadata?.endSessionEndpoint) return undefined
      const target = new URL(metadata.endSessionEndpoint)
      target.searchParams.set('client_id', oidc.clientId)
      target.searchParams.set('post_logout_redirect_uri', postLogoutRedirectUri)
      return target.href
    },
  }
}
