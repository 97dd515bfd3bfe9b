/**
 * The small part of TypeBox the configuration needs, without TypeBox: builders for the JSON
 * Schema kinds the config schema uses (object, string, integer, boolean, array, string literal
 * unions, optional properties), the static type they describe, and TypeBox's Convert,
 * Default and Errors for those kinds, with the same results and the same error messages.
 *
 * Why: TypeBox's `Type` and `Value` are hundreds of modules, a large share of the server's
 * start-up, while the config needs a few dozen lines.
 * test/config/json-schema.test.ts checks these against TypeBox itself on random inputs.
 * A keyword or kind not listed here is refused when the schema is built, so a schema that
 * grows beyond this subset fails loudly rather than going unchecked.
 */

declare const STATIC: unique symbol

/** A schema node; `T` is the TypeScript type of the values it accepts (type-level only). */
export interface Schema<T = unknown> {
  readonly [STATIC]?: T
  readonly type?: string
  readonly description?: string
  readonly default?: unknown
}

export interface StringOptions {
  readonly default?: string
  readonly description?: string
  readonly minLength?: number
  readonly maxLength?: number
  readonly pattern?: string
}
export interface IntegerOptions {
  readonly default?: number
  readonly description?: string
  readonly minimum?: number
  readonly maximum?: number
}
export interface BooleanOptions {
  readonly default?: boolean
  readonly description?: string
}
export interface ArrayOptions<T> {
  readonly default?: readonly T[]
  readonly description?: string
  readonly maxItems?: number
}
export interface ObjectOptions {
  readonly default?: Record<string, never>
  readonly description?: string
  readonly additionalProperties: false
}

/** The marker TypeBox's `Type.Optional` sets: the property may be absent. */
type OptionalMarker = { readonly '~optional': true }
type Properties = Record<string, Schema>

export type Static<S> = S extends Schema<infer T> ? T : never
type Evaluate<T> = { [K in keyof T]: T[K] } & {}
type OptionalKeys<P> = { [K in keyof P]: P[K] extends OptionalMarker ? K : never }[keyof P]
type ObjectStatic<P extends Properties> = Evaluate<
  { [K in Exclude<keyof P, OptionalKeys<P>>]: Static<P[K]> } & {
    [K in OptionalKeys<P>]?: Static<P[K]>
  }
>

/** Every keyword the engine below understands; building a schema with another one throws. */
const KEYWORDS = new Set([
  'type',
  'description',
  'default',
  'minLength',
  'maxLength',
  'pattern',
  'minimum',
  'maximum',
  'const',
  'anyOf',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'maxItems',
])

function node<T>(fields: object): Schema<T> {
  for (const key of Object.keys(fields)) {
    if (!KEYWORDS.has(key)) throw new Error(`config schema: unsupported keyword '${key}'`)
  }
  return fields as Schema<T>
}

/**
 * Builders shaped like TypeBox's `Type`, producing the same JSON Schema (key order
 * included, so docs/configuration.md renders the same).
 */
export const Type = {
  String: (options: StringOptions = {}): Schema<string> => node({ type: 'string', ...options }),
  Integer: (options: IntegerOptions = {}): Schema<number> => node({ type: 'integer', ...options }),
  Boolean: (options: BooleanOptions = {}): Schema<boolean> => node({ type: 'boolean', ...options }),
  Literal: <const V extends string>(value: V): Schema<V> => node({ type: 'string', const: value }),
  Array: <T>(items: Schema<T>, options: ArrayOptions<T> = {}): Schema<T[]> =>
    node({ type: 'array', items, ...options }),
  Union: <const S extends readonly Schema<string | number>[]>(
    anyOf: S,
    options: { readonly default?: Static<S[number]>; readonly description?: string } = {},
  ): Schema<Static<S[number]>> => node({ anyOf, ...options }),
  Object: <const P extends Properties>(
    properties: P,
    options: ObjectOptions,
  ): Schema<ObjectStatic<P>> & { readonly properties: P } => {
    const required = Object.keys(properties).filter((key) => !isOptional(properties[key]))
    return node({
      type: 'object',
      ...(required.length > 0 ? { required } : {}),
      properties,
      ...options,
    }) as Schema<ObjectStatic<P>> & { readonly properties: P }
  },
  /** Marks a property optional, as TypeBox does: a non-enumerable `~optional`. */
  Optional: <S extends Schema>(schema: S): S & OptionalMarker => {
    const copy = { ...schema }
    Object.defineProperty(copy, '~optional', { value: true, enumerable: false })
    return copy as S & OptionalMarker
  },
}

/** The engine's view of a node. */
interface Node {
  readonly type?: string
  readonly default?: unknown
  readonly minLength?: number
  readonly maxLength?: number
  readonly pattern?: string
  readonly minimum?: number
  readonly maximum?: number
  readonly const?: unknown
  readonly anyOf?: readonly Node[]
  readonly properties?: Readonly<Record<string, Node>>
  readonly required?: readonly string[]
  readonly additionalProperties?: boolean
  readonly items?: Node
  readonly maxItems?: number
}

function isOptional(schema: unknown): boolean {
  return (schema as Partial<OptionalMarker> | undefined)?.['~optional'] === true
}

type Json = Record<string, unknown>

/** `typeof object` and not null: arrays included, as in TypeBox's Default. */
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null
const isRecord = (value: unknown): value is Json => isObject(value) && !Array.isArray(value)
const isNumber = (value: unknown): value is number => Number.isFinite(value)

// ---------------------------------------------------------------------------------------------
// Convert: strings from the environment into integers and booleans (TypeBox `Value.Convert`).
// Mutates objects in place; a value that cannot be converted is returned unchanged, for
// `validationErrors` to report.
// ---------------------------------------------------------------------------------------------

const SAFE = { max: BigInt(Number.MAX_SAFE_INTEGER), min: BigInt(Number.MIN_SAFE_INTEGER) }
const NO = Symbol('no conversion')

function bigintFromString(text: string): bigint | typeof NO {
  if (/^-?(0|[1-9]\d*)n$/.test(text)) return BigInt(text.slice(0, -1))
  if (/^-?(0|[1-9]\d*)\.\d+$/.test(text)) return BigInt(text.split('.')[0] as string)
  if (/^-?(0|[1-9]\d*)$/.test(text)) return BigInt(text)
  return NO
}

function toNumber(value: unknown): number | typeof NO {
  if (typeof value === 'bigint') return value <= SAFE.max && value >= SAFE.min ? Number(value) : NO
  if (typeof value === 'boolean') return value ? 1 : 0
  if (isNumber(value)) return value
  if (value === null || value === undefined) return 0
  if (typeof value !== 'string') return NO
  const coerced = +value
  if (isNumber(coerced)) return coerced
  const lower = value.toLowerCase()
  if (lower === 'false') return 0
  if (lower === 'true') return 1
  const big = bigintFromString(value)
  return big !== NO && big <= SAFE.max && big >= SAFE.min ? Number(big) : NO
}

function toBoolean(value: unknown): boolean | typeof NO {
  if (typeof value === 'boolean') return value
  if (typeof value === 'bigint' || typeof value === 'number') {
    return value === 0n || value === 0 ? false : value === 1n || value === 1 ? true : NO
  }
  if (value === null || value === undefined) return false
  if (typeof value !== 'string') return NO
  const lower = value.toLowerCase()
  return lower === 'false' || value === '0' ? false : lower === 'true' || value === '1' ? true : NO
}

function toText(value: unknown): string | typeof NO {
  if (typeof value === 'string') return value
  if (typeof value === 'bigint' || typeof value === 'boolean' || isNumber(value)) {
    return value.toString()
  }
  if (value === null) return 'null'
  if (value === undefined) return ''
  return NO
}

export function convert(schema: Schema, value: unknown): unknown {
  const n = schema as Node
  if (n.anyOf) {
    if (n.anyOf.some((branch) => isValid(branch, value))) return value
    const selected = n.anyOf
      .map((branch) => convert(branch, clone(value)))
      .find((candidate) => isValid(n, candidate))
    return selected === undefined ? value : selected
  }
  if ('const' in n) {
    if (value === n.const) return value
    const text = toText(value)
    return text === n.const ? text : value
  }
  switch (n.type) {
    case 'integer': {
      const number = toNumber(value)
      return number === NO ? value : Math.trunc(number)
    }
    case 'boolean': {
      const bool = toBoolean(value)
      return bool === NO ? value : bool
    }
    case 'string': {
      const text = toText(value)
      return text === NO ? value : text
    }
    case 'array': {
      // One value stands for a list of one (as TypeBox converts it).
      const list = Array.isArray(value) ? value : [value]
      const items = n.items
      return items ? list.map((item) => convert(items, item)) : list
    }
    case 'object': {
      if (!isRecord(value)) return value
      const properties = n.properties ?? {}
      for (const key of Object.getOwnPropertyNames(value)) {
        const property = Object.hasOwn(properties, key) ? properties[key] : undefined
        // An optional property set to undefined counts as absent.
        if (!property || (isOptional(property) && value[key] === undefined)) continue
        value[key] = convert(property, value[key])
      }
      return value
    }
    default:
      return value
  }
}

// ---------------------------------------------------------------------------------------------
// Default: fill absent values from `default` (TypeBox `Value.Default`), in place.
// ---------------------------------------------------------------------------------------------

export function applyDefaults(schema: Schema, value: unknown): unknown {
  const n = schema as Node
  const defaulted = 'default' in n && value === undefined ? clone(n.default) : value
  if (n.anyOf) {
    for (const branch of n.anyOf) {
      const result = applyDefaults(branch, clone(defaulted))
      if (isValid(branch, result)) return result
    }
    return defaulted
  }
  if (n.type !== 'object' || !isObject(defaulted)) return defaulted
  for (const [key, property] of Object.entries(n.properties ?? {})) {
    const filled = applyDefaults(property, defaulted[key])
    // Nothing to assign: an absent optional property, or one without a default.
    if (filled === undefined && (isOptional(property) || !('default' in property))) continue
    defaulted[key] = filled
  }
  return defaulted
}

function clone(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(clone)
  if (isRecord(value)) {
    const copy: Json = {}
    for (const key of Object.keys(value)) copy[key] = clone(value[key])
    return copy
  }
  return value
}

// ---------------------------------------------------------------------------------------------
// Errors: every failed keyword, in TypeBox's order and with its messages (`Value.Errors`,
// without its cap of 8 errors, so that every problem is reported at once).
// ---------------------------------------------------------------------------------------------

export interface ValidationError {
  readonly keyword: string
  /** JSON Pointer of the value, '' for the root. */
  readonly instancePath: string
  readonly params: Readonly<Record<string, unknown>>
  readonly message: string
}

export function validationErrors(schema: Schema, value: unknown): ValidationError[] {
  const errors: ValidationError[] = []
  collect(schema as Node, '', value, errors)
  return errors
}

function isValid(schema: Node, value: unknown): boolean {
  return collect(schema, '', value, [])
}

function fail(
  errors: ValidationError[],
  keyword: string,
  instancePath: string,
  params: Record<string, unknown>,
  message: string,
): false {
  errors.push({ keyword, instancePath, params, message })
  return false
}

function hasType(type: string, value: unknown): boolean {
  switch (type) {
    case 'object':
      return isRecord(value)
    case 'string':
      return typeof value === 'string'
    case 'integer':
      return Number.isInteger(value)
    case 'boolean':
      return typeof value === 'boolean'
    case 'array':
      return Array.isArray(value)
    default:
      throw new Error(`config schema: unsupported type '${type}'`)
  }
}

const pointer = (path: string, key: string) =>
  `${path}/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`

/** Appends the errors of `value` against `n` at `path`; true when there are none. */
function collect(n: Node, path: string, value: unknown, errors: ValidationError[]): boolean {
  let ok = true
  if (n.type !== undefined && !hasType(n.type, value)) {
    ok = fail(errors, 'type', path, { type: n.type }, `must be ${n.type}`)
  }
  if (isRecord(value)) ok = collectObject(n, path, value, errors) && ok
  if (Array.isArray(value)) {
    if (n.maxItems !== undefined && value.length > n.maxItems) {
      const message = `must not have more than ${n.maxItems} items`
      ok = fail(errors, 'maxItems', path, { limit: n.maxItems }, message)
    }
    const items = n.items
    if (items) {
      value.forEach((item, i) => {
        ok = collect(items, `${path}/${i}`, item, errors) && ok
      })
    }
  }
  if (typeof value === 'string') {
    // Lengths in code points, as JSON Schema counts them.
    const length = n.minLength === undefined && n.maxLength === undefined ? 0 : [...value].length
    if (n.minLength !== undefined && length < n.minLength) {
      const message = `must not have fewer than ${n.minLength} characters`
      ok = fail(errors, 'minLength', path, { limit: n.minLength }, message)
    }
    if (n.maxLength !== undefined && length > n.maxLength) {
      const message = `must not have more than ${n.maxLength} characters`
      ok = fail(errors, 'maxLength', path, { limit: n.maxLength }, message)
    }
    if (n.pattern !== undefined && !new RegExp(n.pattern, 'u').test(value)) {
      const message = `must match pattern "${n.pattern}"`
      ok = fail(errors, 'pattern', path, { pattern: n.pattern }, message)
    }
  }
  if (isNumber(value) || typeof value === 'bigint') {
    if (n.minimum !== undefined && !(value >= n.minimum)) {
      const params = { comparison: '>=', limit: n.minimum }
      ok = fail(errors, 'minimum', path, params, `must be >= ${n.minimum}`)
    }
    if (n.maximum !== undefined && !(value <= n.maximum)) {
      const params = { comparison: '<=', limit: n.maximum }
      ok = fail(errors, 'maximum', path, params, `must be <= ${n.maximum}`)
    }
  }
  if ('const' in n && value !== n.const) {
    const params = { allowedValue: n.const }
    ok = fail(errors, 'const', path, params, 'must be equal to constant')
  }
  if (n.anyOf) {
    const failed: ValidationError[] = []
    if (!n.anyOf.some((branch) => collect(branch, path, value, failed))) {
      errors.push(...failed)
      ok = fail(errors, 'anyOf', path, {}, 'must match a schema in anyOf')
    }
  }
  return ok
}

function collectObject(n: Node, path: string, value: Json, errors: ValidationError[]): boolean {
  let ok = true
  const properties = n.properties ?? {}
  const required = n.required ?? []
  const missing = required.filter((key) => !hasKey(value, key))
  if (missing.length > 0) {
    const message = `must have required properties ${missing.join(', ')}`
    ok = fail(errors, 'required', path, { requiredProperties: missing }, message)
  }
  if (n.additionalProperties === false) {
    const unknown = Object.getOwnPropertyNames(value).filter(
      (key) => !Object.hasOwn(properties, key),
    )
    // Each unknown key fails the `false` schema at its own path, then the parent reports them.
    for (const key of unknown) fail(errors, 'boolean', pointer(path, key), {}, 'schema is false')
    if (unknown.length > 0) {
      const params = { additionalProperties: unknown }
      ok = fail(errors, 'additionalProperties', path, params, 'must not have additional properties')
    }
  }
  for (const [key, property] of Object.entries(properties)) {
    // A required property is checked whenever present; any other only when not undefined.
    const skip = required.includes(key) ? !hasKey(value, key) : value[key] === undefined
    if (!skip) ok = collect(property, pointer(path, key), value[key], errors) && ok
  }
  return ok
}

/** `in`, except for keys that would find Object.prototype's own (as TypeBox does). */
function hasKey(value: Json, key: string): boolean {
  return ['__proto__', 'constructor', 'prototype'].includes(key)
    ? Object.hasOwn(value, key)
    : key in value
}
