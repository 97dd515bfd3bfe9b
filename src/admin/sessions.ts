import { hash, randomBytes, timingSafeEqual } from 'node:crypto'
import type { Operator } from './operators.ts'

/**
 * Console sessions, in memory: a session id (256 random bits) lives only in an HttpOnly
 * cookie; the map is keyed by its SHA-256, so the ids are not kept in the process either.
 * Each session has its own CSRF token (synchronizer pattern) and may hold one "flash": a
 * new PAT's plaintext, handed out exactly once and then dropped.
 */
export interface Session {
  readonly operator: Operator
  readonly csrf: string
  readonly createdAt: number
  readonly expiresAt: number
  lastSeen: number
  /** A just-issued token to show once; `take` deletes it. */
  flash: { readonly token: string; readonly label: string } | undefined
}

export interface Sessions {
  create(operator: Operator, now: number): { id: string; session: Session }
  /** The live session for a cookie value; ends expired and idle ones. */
  get(id: string | undefined, now: number): Session | undefined
  end(id: string | undefined): void
  /** Ends every session of one admin token (revoked). */
  endWhere(test: (session: Session) => boolean): void
  readonly size: number
}

export const MAX_SESSIONS = 10_000

/**
 * Sessions one credential (an admin token, or an SSO subject) may hold. Why: with only the
 * global cap, one credential signing in 10,000 times evicted every other operator's session;
 * now a flood ends only the flooder's own oldest sessions.
 */
export const MAX_SESSIONS_PER_CREDENTIAL = 16

/** The credential a session was opened with: its admin token's hash, or the SSO actor. */
const credentialOf = (operator: Operator) => operator.adminTokenHash ?? operator.actor

export function createSessions(options: { ttlMs: number; idleMs: number }): Sessions {
  const byHash = new Map<string, Session>()
  // Per credential, its sessions' keys, oldest first.
  const byCredential = new Map<string, Set<string>>()
  const key = (id: string) => hash('sha256', id, 'hex')
  const remove = (k: string) => {
    const session = byHash.get(k)
    if (!session) return
    byHash.delete(k)
    const own = byCredential.get(credentialOf(session.operator))
    own?.delete(k)
    if (own?.size === 0) byCredential.delete(credentialOf(session.operator))
  }
  return {
    create(operator, now) {
      const own = byCredential.get(credentialOf(operator)) ?? new Set<string>()
      byCredential.set(credentialOf(operator), own)
      if (own.size >= MAX_SESSIONS_PER_CREDENTIAL) remove(own.values().next().value as string)
      if (byHash.size >= MAX_SESSIONS) {
        // Oldest first (Map keeps insertion order): many credentials cannot grow memory.
        const oldest = byHash.keys().next().value
        if (oldest !== undefined) remove(oldest)
      }
      const id = randomBytes(32).toString('base64url')
      const session: Session = {
        operator,
        csrf: randomBytes(32).toString('base64url'),
        createdAt: now,
        expiresAt: Math.min(now + options.ttlMs, operator.expiresAt),
        lastSeen: now,
        flash: undefined,
      }
      byHash.set(key(id), session)
      own.add(key(id))
      return { id, session }
    },
    get(id, now) {
      if (!id || id.length > 64) return undefined
      const k = key(id)
      const session = byHash.get(k)
      if (!session) return undefined
      if (now >= session.expiresAt || now - session.lastSeen >= options.idleMs) {
        remove(k)
        return undefined
      }
      session.lastSeen = now
      return session
    },
    end(id) {
      if (id) remove(key(id))
    },
    endWhere(test) {
      for (const [k, session] of byHash) if (test(session)) remove(k)
    },
    get size() {
      return byHash.size
    },
  }
}

/** Constant-time comparison of a submitted CSRF token with the session's. */
export function csrfMatches(session: Session, submitted: unknown): boolean {
  if (typeof submitted !== 'string') return false
  const a = Buffer.from(session.csrf)
  const b = Buffer.from(submitted)
  return a.length === b.length && timingSafeEqual(a, b)
}
