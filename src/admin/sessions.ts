import {
  createCipheriv,
  createDecipheriv,
  hash,
  hkdfSync,
  randomBytes,
  timingSafeEqual,
} from 'node:crypto'
import type { AdminStore, ConsoleSessionRecord } from '../stores/admin-store.ts'
import type { Operator } from './operators.ts'

/**
 * Console sessions, in the store, so that any instance serves any page (no sticky
 * sessions). A session id (256 random bits) lives only in an HttpOnly cookie; the store
 * keeps its SHA-256, so a copy of the database opens no session. Each session has its own
 * CSRF token (synchronizer pattern), a one-shot notice for the next page, and may hold one
 * "flash": a new PAT's plaintext, handed out exactly once. The flash is sealed (AES-256-GCM)
 * under a key derived from the cookie itself, so the store never holds a readable token.
 */
export interface Session {
  /** The cookie value (memory only, never stored). */
  readonly id: string
  readonly operator: Operator
  readonly csrf: string
  readonly createdAt: number
  readonly expiresAt: number
  readonly lastSeen: number
  /** The message to show on the next page, if any. */
  notice: Notice | undefined
}

export interface Notice {
  readonly kind: 'ok' | 'error'
  readonly text: string
}

export interface Flash {
  readonly token: string
  readonly label: string
  /** Where the "shown once" page leads back to (default: the tokens page). */
  readonly back?: string | undefined
}

export interface Sessions {
  create(operator: Operator, now: number): Promise<Session>
  /** The live session for a cookie value; ends expired and idle ones. */
  get(id: string | undefined, now: number): Promise<Session | undefined>
  end(id: string | undefined): Promise<void>
  /** Keeps `notice` for the next page (undefined: clears it). */
  setNotice(session: Session, notice: Notice | undefined): Promise<void>
  setFlash(session: Session, flash: Flash): Promise<void>
  /** The flash, once: it is cleared in the same call. */
  takeFlash(session: Session): Promise<Flash | undefined>
}

/** Sessions kept in all, oldest dropped first: many credentials cannot grow the table. */
export const MAX_SESSIONS = 10_000

/**
 * Sessions one credential (an admin token, or an SSO subject) may hold. Why: with only the
 * global cap, one credential signing in 10,000 times evicted every other operator's session;
 * now a flood ends only the flooder's own oldest sessions.
 */
export const MAX_SESSIONS_PER_CREDENTIAL = 16

/** A session's last use is written at most this often (not on every page view). */
const TOUCH_EVERY_MS = 60_000

type SessionStore = Pick<
  AdminStore,
  'insertSession' | 'findSession' | 'updateSession' | 'deleteSession'
>

export function createSessions(
  store: SessionStore,
  options: { ttlMs: number; idleMs: number },
): Sessions {
  const key = (id: string) => hash('sha256', id, 'hex')
  const toSession = (id: string, record: ConsoleSessionRecord): Session => ({
    id,
    operator: record.operator,
    csrf: record.csrf,
    createdAt: record.createdAt,
    expiresAt: record.expiresAt,
    lastSeen: record.lastSeen,
    notice: record.notice === null ? undefined : (JSON.parse(record.notice) as Notice),
  })
  return {
    async create(operator, now) {
      const id = randomBytes(32).toString('base64url')
      const record: ConsoleSessionRecord = {
        idHash: key(id),
        credential: operator.adminTokenHash ?? operator.actor,
        operator,
        csrf: randomBytes(32).toString('base64url'),
        createdAt: now,
        expiresAt: Math.min(now + options.ttlMs, operator.expiresAt),
        lastSeen: now,
        flash: null,
        notice: null,
      }
      await store.insertSession(record, {
        perCredential: MAX_SESSIONS_PER_CREDENTIAL,
        total: MAX_SESSIONS,
        now,
        staleBefore: now - options.idleMs,
      })
      return toSession(id, record)
    },
    async get(id, now) {
      if (!id || id.length > 64) return undefined
      const record = await store.findSession(key(id))
      if (!record) return undefined
      if (now >= record.expiresAt || now - record.lastSeen >= options.idleMs) {
        await store.deleteSession(record.idHash)
        return undefined
      }
      if (now - record.lastSeen >= TOUCH_EVERY_MS) {
        await store.updateSession(record.idHash, { lastSeen: now })
      }
      return toSession(id, record)
    },
    async end(id) {
      if (id && id.length <= 64) await store.deleteSession(key(id))
    },
    async setNotice(session, notice) {
      session.notice = notice
      await store.updateSession(key(session.id), {
        notice: notice === undefined ? null : JSON.stringify(notice),
      })
    },
    async setFlash(session, flash) {
      await store.updateSession(key(session.id), { flash: sealFlash(session.id, flash) })
    },
    async takeFlash(session) {
      const record = await store.findSession(key(session.id))
      if (!record?.flash) return undefined
      await store.updateSession(record.idHash, { flash: null })
      return openFlash(session.id, record.flash)
    },
  }
}

/** The flash key: only a request that presents the cookie can derive it. */
function flashKey(id: string): Buffer {
  return Buffer.from(hkdfSync('sha256', id, '', 'tokengate console flash', 32))
}

function sealFlash(id: string, flash: Flash): string {
  const nonce = randomBytes(12)
  const cipher = createCipheriv('aes-256-gcm', flashKey(id), nonce)
  const body = Buffer.concat([cipher.update(JSON.stringify(flash), 'utf8'), cipher.final()])
  return [nonce, body, cipher.getAuthTag()].map((b) => b.toString('base64url')).join('.')
}

function openFlash(id: string, sealed: string): Flash | undefined {
  const [nonce, body, tag] = sealed.split('.')
  if (!nonce || body === undefined || !tag) return undefined
  try {
    const decipher = createDecipheriv('aes-256-gcm', flashKey(id), Buffer.from(nonce, 'base64url'))
    decipher.setAuthTag(Buffer.from(tag, 'base64url'))
    const text = Buffer.concat([
      decipher.update(Buffer.from(body, 'base64url')),
      decipher.final(),
    ]).toString('utf8')
    return JSON.parse(text) as Flash
  } catch {
    return undefined
  }
}

/** Constant-time comparison of a submitted CSRF token with the session's. */
export function csrfMatches(session: Session, submitted: unknown): boolean {
  if (typeof submitted !== 'string') return false
  const a = Buffer.from(session.csrf)
  const b = Buffer.from(submitted)
  return a.length === b.length && timingSafeEqual(a, b)
}
