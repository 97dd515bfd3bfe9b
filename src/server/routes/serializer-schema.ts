/**
 * The response schema as given to Fastify's serializer (fast-json-stringify), rewritten so
 * that serialising needs no validation; the OpenAPI document keeps the original schema.
 *
 * Why: fast-json-stringify picks an `anyOf` branch by running the schema validator (ajv) on
 * the value for each branch, per response. `/me` has four such fields (`tokenType`,
 * `tokenId`, `issuer`, `expiresAt`), so every `/me` would run up to seven ajv checks, among
 * them ajv-formats' `date-time` parser. The rewrites describe the same JSON:
 *
 * - `anyOf: [X, { type: 'null' }]` with a single-typed X → X with `type: [X.type, 'null']`;
 * - `anyOf` of string constants (TypeBox literal unions) → `{ type: 'string', enum }`.
 *
 * Our handlers build these bodies themselves, so they always match; a value that did not
 * would now be written as its type's JSON instead of failing the response with a 500.
 */
export function serializerSchema<T>(schema: T): T {
  return rewrite(schema) as T
}

type Schema = Record<string, unknown>

function rewrite(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(rewrite)
  if (typeof value !== 'object' || value === null) return value
  const schema = value as Schema
  const out: Schema = {}
  for (const [key, child] of Object.entries(schema)) out[key] = rewrite(child)
  const branches = out.anyOf
  if (!Array.isArray(branches)) return out
  const { anyOf: _anyOf, ...siblings } = out
  const nullable = nullableOf(branches as Schema[])
  if (nullable) return { ...siblings, ...nullable, type: [nullable.type, 'null'] }
  const constants = stringConstants(branches as Schema[])
  if (constants) return { ...siblings, type: 'string', enum: constants }
  return out
}

function nullableOf(branches: readonly Schema[]): Schema | undefined {
  if (branches.length !== 2) return undefined
  const other = branches.find((b) => !isNull(b))
  if (!other || !branches.some(isNull)) return undefined
  const simple =
    typeof other.type === 'string' &&
    other.type !== 'null' &&
    other.anyOf === undefined &&
    other.oneOf === undefined &&
    other.allOf === undefined &&
    other.$ref === undefined &&
    other.const === undefined &&
    other.enum === undefined
  return simple ? other : undefined
}

function isNull(schema: Schema): boolean {
  return schema.type === 'null' && Object.keys(schema).every((k) => k === 'type')
}

function stringConstants(branches: readonly Schema[]): string[] | undefined {
  const values: string[] = []
  for (const branch of branches) {
    const extra = Object.keys(branch).some((k) => k !== 'type' && k !== 'const')
    if (extra || typeof branch.const !== 'string') return undefined
    if (branch.type !== undefined && branch.type !== 'string') return undefined
    values.push(branch.const)
  }
  return values.length > 0 ? values : undefined
}
