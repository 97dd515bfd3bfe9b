/**
 * Shared response and parameter schemas of the built-in API (JSON Schema 2020-12).
 *
 * Written with the small builders below rather than TypeBox: `import Type from 'typebox'`
 * loads hundreds of modules at start-up, and the routes never use its inferred types
 * (handlers return `unknown`). The builders emit exactly what TypeBox's
 * `Type` did, key order included, so the OpenAPI document and Fastify's validators and
 * serialisers are unchanged; test/server/routes/schemas.test.ts checks them against TypeBox.
 */

type Json = { readonly [key: string]: unknown }

/** The marker TypeBox's `Type.Optional` set: the property may be absent (non-enumerable). */
const OPTIONAL = '~optional'

export const string = (options: Json = {}) => ({ type: 'string', ...options })
export const integer = (options: Json = {}) => ({ type: 'integer', ...options })
export const array = (items: object) => ({ type: 'array', items })
/** `anyOf` of string constants (TypeBox's union of literals). */
export const literals = (...values: readonly string[]) => ({
  anyOf: values.map((value) => ({ type: 'string', const: value })),
})
export const nullable = (schema: object) => ({ anyOf: [schema, { type: 'null' }] })
/** Any JSON object (TypeBox's `Record(String(), Unknown())`). */
export const record = () => ({ type: 'object', patternProperties: { '^.*$': {} } })

/** Marks an object property optional: left out of the parent's `required`. */
export function optional<S extends object>(schema: S): S {
  const copy = { ...schema }
  Object.defineProperty(copy, OPTIONAL, { value: true, enumerable: false })
  return copy
}

/**
 * `type`, `required` (the properties not marked optional, omitted when none), `properties`,
 * then the options in their order: TypeBox's layout for `Type.Object`.
 */
export function object(
  properties: Readonly<Record<string, object>>,
  options: Json & { readonly additionalProperties: boolean },
) {
  const required = Object.keys(properties).filter(
    (key) => (properties[key] as { [OPTIONAL]?: true })[OPTIONAL] !== true,
  )
  return {
    type: 'object',
    ...(required.length > 0 ? { required } : {}),
    properties,
    ...options,
  }
}

export const Problem = object(
  {
    type: string({ format: 'uri' }),
    title: string(),
    status: integer(),
    detail: string(),
    code: string(),
    requestId: string(),
  },
  { $id: 'Problem', additionalProperties: true, description: 'RFC 9457 problem details' },
)

const Timestamp = string({ format: 'date-time' })
const NullableTimestamp = nullable(Timestamp)

export const TokenMetadata = object(
  {
    id: string(),
    name: string(),
    subject: string(),
    tenantId: string(),
    permissions: array(string()),
    hint: string({ description: 'Display hint: `pat_…` and the last 4 characters.' }),
    status: literals('active', 'revoked', 'expired', 'rotated', 'grace', 'disabled'),
    createdAt: Timestamp,
    expiresAt: NullableTimestamp,
    lastUsedAt: NullableTimestamp,
    revokedAt: NullableTimestamp,
    rotatedFrom: nullable(string()),
    graceUntil: nullable(Timestamp),
  },
  { additionalProperties: false },
)

export const AuditEventBody = object(
  {
    id: string(),
    time: Timestamp,
    type: string(),
    tenantId: nullable(string()),
    actor: nullable(string()),
    outcome: string(),
    clientAddress: nullable(string()),
    requestId: nullable(string()),
    details: record(),
  },
  { additionalProperties: false },
)

export const PageQuery = object(
  {
    limit: optional(
      integer({
        minimum: 1,
        description: 'Page size: default 50, at most 200 (both configurable by the operator).',
      }),
    ),
    cursor: optional(
      string({ minLength: 1, maxLength: 512, description: 'From the previous page.' }),
    ),
  },
  { additionalProperties: false },
)

export const IdParams = object(
  { id: string({ minLength: 1, maxLength: 64 }) },
  { additionalProperties: false },
)

export function pageOf(item: object) {
  return object(
    { items: array(item), nextCursor: nullable(string()) },
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
