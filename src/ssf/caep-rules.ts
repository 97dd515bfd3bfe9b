/**
 * What a verified CAEP event asks of tokengate: the JWT revocation rules it maps to (CAEP 1.0
 * §3, subjects per SSF 1.0 §3). Pure: receiver.ts applies the answer with `revokeJwts`.
 *
 * - `session-revoked`: the session's tokens (`sid` rule); with no session in the subject,
 *   the user's tokens issued before the event (`sub` rule).
 * - `credential-change`, `token-claims-change`: the user's tokens issued before the event
 *   (`sub` rule): tokens minted after it carry the new credential or claims and pass. A
 *   subject naming one token (`jwt_id`) revokes that token (`jti` rule).
 * - verification and stream-updated: stream management, no rule.
 * - any other event type: accepted and audited, no rule (we requested none of them).
 */
import type { JwtRevocationKind } from '../core/jwt-revocations.ts'
import { CAEP_EVENT, SSF_EVENT } from './events.ts'
import type { VerifiedSet } from './set-verify.ts'

export interface RuleRequest {
  readonly kind: Exclude<JwtRevocationKind, 'tenant'>
  readonly value: string
  /** `sub` rules: tokens issued before this (epoch ms); never later than `nowMs`. */
  readonly issuedBefore?: number
}

export type CaepMapping =
  | { readonly kind: 'revoke'; readonly rules: readonly RuleRequest[] }
  | { readonly kind: 'stream'; readonly note: string }
  /** Valid, but nothing to do: `note` says why (audited). */
  | { readonly kind: 'ignored'; readonly note: string }

/** Whose tokens a subject names: issuers whose `iss_sub`/`jwt_id` subjects are ours. */
export interface SubjectScope {
  /** The trusted JWT issuer the rules are made for (the IdP's `iss`). */
  readonly jwtIssuer: string
  /** The transmitter's issuer: its `iss_sub` subjects are accepted as ours too. */
  readonly transmitter: string
}

interface Subject {
  readonly sid?: string
  readonly sub?: string
  readonly jti?: string
}

/** Maps one verified SET to rules, at `nowMs` (the receiver's clock). */
export function mapCaepEvent(set: VerifiedSet, scope: SubjectScope, nowMs: number): CaepMapping {
  switch (set.eventType) {
    case SSF_EVENT.verification:
      return { kind: 'stream', note: 'verification' }
    case SSF_EVENT.streamUpdated:
      return {
        kind: 'stream',
        note: `stream ${typeof set.event.status === 'string' ? set.event.status.slice(0, 32) : 'updated'}`,
      }
    case CAEP_EVENT.sessionRevoked:
    case CAEP_EVENT.credentialChange:
    case CAEP_EVENT.tokenClaimsChange:
      break
    default:
      return { kind: 'ignored', note: 'event type not acted on' }
  }
  // CAEP drafts (and some transmitters) put the subject inside the event as `subject`.
  const subject = readSubject(set.subId ?? set.event.subject, scope, set.eventType)
  if (subject === undefined) return { kind: 'ignored', note: 'subject format not mapped' }
  // `event_timestamp` (seconds) is when it happened; without it, when the SET was issued.
  // Never after now: a rule refuses tokens that exist (jwt-revocation-operations.ts).
  const at = typeof set.event.event_timestamp === 'number' ? set.event.event_timestamp : set.iat
  const issuedBefore = Math.min(Math.floor(at * 1000), nowMs)
  if (subject.jti !== undefined)
    return { kind: 'revoke', rules: [{ kind: 'jti', value: subject.jti }] }
  if (set.eventType === CAEP_EVENT.sessionRevoked && subject.sid !== undefined) {
    return { kind: 'revoke', rules: [{ kind: 'sid', value: subject.sid }] }
  }
  if (subject.sub !== undefined) {
    return { kind: 'revoke', rules: [{ kind: 'sub', value: subject.sub, issuedBefore }] }
  }
  return { kind: 'ignored', note: 'no user or session in the subject' }
}

/**
 * Reads the session, user or token an SSF subject identifier names (RFC 9493 formats):
 * `opaque` is the session id of a session-revoked event and the user otherwise; `iss_sub`
 * and `jwt_id` only when their issuer is ours; `email` as the user (IdPs whose `sub` is the
 * address); `complex` through its `session` and `user` members.
 */
function readSubject(id: unknown, scope: SubjectScope, eventType: string): Subject | undefined {
  if (typeof id !== 'object' || id === null) return undefined
  const s = id as Record<string, unknown>
  const ours = (iss: unknown) => iss === scope.jwtIssuer || iss === scope.transmitter
  switch (s.format) {
    case 'opaque':
      if (!text(s.id)) return undefined
      return eventType === CAEP_EVENT.sessionRevoked ? { sid: s.id } : { sub: s.id }
    case 'iss_sub':
      return text(s.sub) && ours(s.iss) ? { sub: s.sub } : undefined
    case 'jwt_id':
      return text(s.jti) && ours(s.iss) ? { jti: s.jti } : undefined
    case 'email':
      return text(s.email) ? { sub: s.email } : undefined
    case 'complex': {
      const session = readSubject(s.session, scope, CAEP_EVENT.sessionRevoked)
      const user = readSubject(s.user, scope, '')
      if (session?.sid === undefined && user?.sub === undefined) return undefined
      return {
        ...(session?.sid === undefined ? {} : { sid: session.sid }),
        ...(user?.sub === undefined ? {} : { sub: user.sub }),
      }
    }
    default:
      return undefined
  }
}

function text(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0 && value.length <= 1024
}
