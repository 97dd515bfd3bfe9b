/**
 * The registry of credential kinds (`credential-kind.ts` says what a kind is): the built-in
 * PAT and JWT, and any kind registered by an application or a test.
 */
import { jwtKind } from './authenticators/jwt.ts'
import { patKind } from './authenticators/pat.ts'
import type { CredentialKind } from './credential-kind.ts'

/** PAT first: JWT is the fallback that claims every other bearer token. */
const registered: CredentialKind[] = [patKind, jwtKind]

/**
 * Registers a kind: every authenticator built afterwards asks it (before the fallback
 * kinds), and the limiter, recorder and challenges describe its principals with it.
 * Registering a name twice replaces the kind of that name.
 */
export function registerCredentialKind(kind: CredentialKind): void {
  const at = registered.findIndex((k) => k.name === kind.name)
  if (at !== -1) {
    registered[at] = kind
    return
  }
  if (kind.fallback) {
    registered.push(kind)
    return
  }
  const firstFallback = registered.findIndex((k) => k.fallback === true)
  registered.splice(firstFallback === -1 ? registered.length : firstFallback, 0, kind)
}

/** Removes a registered kind (a test's own); returns whether it was registered. */
export function unregisterCredentialKind(name: string): boolean {
  const at = registered.findIndex((k) => k.name === name)
  if (at === -1) return false
  registered.splice(at, 1)
  return true
}

/** The registered kinds, in the order they are asked. */
export function credentialKinds(): readonly CredentialKind[] {
  return registered
}

/** What the limiter, recorder, challenges and tracing read of a kind: never how it authenticates. */
export type KindDescription = Omit<CredentialKind, 'create' | 'fallback'>

/** Kinds of a gate of their own (the admin listener's), by name. */
const described = new Map<string, KindDescription>()

/**
 * Describes a kind that a gate of its own asks (the admin listener's admin token, operator
 * JWT and console session): the limiter, recorder, challenges and tracing describe its
 * principals and refusals with it, and no authenticator built by `credentialKinds()` ever
 * asks it, so an operator credential is never accepted on the API. Idempotent.
 */
export function describeCredentialKind(kind: KindDescription): void {
  if (registered.some((k) => k.name === kind.name)) {
    throw new Error(`credential kind ${kind.name} is registered on the API already`)
  }
  described.set(kind.name, kind)
}

/** The registered or described kind of this name (a principal's `tokenType`), if any. */
export function credentialKindNamed(name: string): KindDescription | undefined {
  // Indexed: a `for…of` here allocated an array iterator per call (per allowed request).
  for (let i = 0; i < registered.length; i++) {
    const kind = registered[i] as CredentialKind
    if (kind.name === name) return kind
  }
  return described.get(name)
}
