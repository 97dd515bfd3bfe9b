import Type from 'typebox'

/** Shared response and parameter schemas of the built-in API (JSON Schema 2020-12). */

export const Problem = Type.Object(
  {
    type: Type.String({ format: 'uri' }),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.String(),
    code: Type.String(),
    requestId: Type.String(),
  },
  { $id: 'Problem', additionalProperties: true, description: 'RFC 9457 problem details' },
)

const Timestamp = Type.String({ format: 'date-time' })
const NullableTimestamp = Type.Union([Timestamp, Type.Null()])

export const TokenMetadata = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    subject: Type.String(),
    tenantId: Type.String(),
    permissions: Type.Array(Type.String()),
    hint: Type.String({ description: 'Display hint: `pat_…` and the last 4 characters.' }),
    status: Type.Union([
      Type.Literal('active'),
      Type.Literal('revoked'),
      Type.Literal('expired'),
      Type.Literal('rotated'),
      Type.Literal('grace'),
    ]),
    createdAt: Timestamp,
    expiresAt: NullableTimestamp,
    lastUsedAt: NullableTimestamp,
    revokedAt: NullableTimestamp,
    rotatedFrom: Type.Union([Type.String(), Type.Null()]),
    graceUntil: Type.Union([Timestamp, Type.Null()]),
  },
  { additionalProperties: false },
)

export const AuditEventBody = Type.Object(
  {
    id: Type.String(),
    time: Timestamp,
    type: Type.String(),
    tenantId: Type.Union([Type.String(), Type.Null()]),
    actor: Type.Union([Type.String(), Type.Null()]),
    outcome: Type.String(),
    clientAddress: Type.Union([Type.String(), Type.Null()]),
    requestId: Type.Union([Type.String(), Type.Null()]),
    details: Type.Record(Type.String(), Type.Unknown()),
  },
  { additionalProperties: false },
)

export const PageQuery = Type.Object(
  {
    limit: Type.Optional(
      Type.Integer({
        minimum: 1,
        description: 'Page size: default 50, at most 200 (both configurable by the operator).',
      }),
    ),
    cursor: Type.Optional(
      Type.String({ minLength: 1, maxLength: 512, description: 'From the previous page.' }),
    ),
  },
  { additionalProperties: false },
)

export const IdParams = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: 64 }) },
  { additionalProperties: false },
)

export function pageOf<T extends object>(item: T) {
  return Type.Object(
    {
      items: Type.Array(item),
      nextCursor: Type.Union([Type.String(), Type.Null()]),
    },
    { additionalProperties: false },
  )
}

/**
 * ISO 8601 text of an epoch-ms time. Memoised (bounded): `/me` formats the caller's expiry
 * on every request and a token's expiry never changes, so the same few thousand values
 * recur; a Map hit is ~10× cheaper than `new Date(ms).toISOString()`.
 */
export function iso(ms: number | null): string | null {
  if (ms === null) return null
  let text = isoCache.get(ms)
  if (text === undefined) {
    text = new Date(ms).toISOString()
    if (isoCache.size >= ISO_CACHE_MAX) isoCache.clear()
    isoCache.set(ms, text)
  }
  return text
}

const ISO_CACHE_MAX = 10_000
const isoCache = new Map<number, string>()
