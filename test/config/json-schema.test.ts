import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import fc from 'fast-check'
import TypeBox from 'typebox'
import { Settings } from 'typebox/system'
import Value from 'typebox/value'
import {
  applyDefaults,
  convert,
  type Schema,
  Type,
  validationErrors,
} from '../../src/config/json-schema.ts'
import { ConfigError, loadConfig } from '../../src/config/load.ts'
import { ConfigSchema } from '../../src/config/schema.ts'

interface Node {
  type?: string
  const?: string
  anyOf?: Node[]
  properties?: Record<string, Node>
  [key: string]: unknown
}

const optional = (node: Node) => (node as { '~optional'?: boolean })['~optional'] === true

/** The same schema built with TypeBox itself, the reference the engine is checked against. */
function toTypeBox(node: Node): TypeBox.TSchema {
  const { type, const: literal, anyOf, properties, items, required: _, ...options } = node
  let built: TypeBox.TSchema
  if (anyOf) built = TypeBox.Union(anyOf.map(toTypeBox), options)
  else if (type === 'array') built = TypeBox.Array(toTypeBox(items as Node), options)
  else if (literal !== undefined) built = TypeBox.Literal(literal)
  else if (type === 'object') {
    const mapped = Object.fromEntries(
      Object.entries(properties ?? {}).map(([key, child]) => [key, toTypeBox(child)]),
    )
    built = TypeBox.Object(mapped, options)
  } else if (type === 'string') built = TypeBox.String(options)
  else if (type === 'integer') built = TypeBox.Integer(options)
  else if (type === 'boolean') built = TypeBox.Boolean(options)
  else throw new Error(`no TypeBox mapping for ${JSON.stringify(node)}`)
  return optional(node) ? TypeBox.Optional(built) : built
}

const reference = toTypeBox(ConfigSchema as unknown as Node)

/** Values that exercise every conversion rule: numeric and boolean strings, null, bigint… */
const scalar = fc.oneof(
  fc.constantFrom(
    '',
    '0',
    '1',
    'true',
    'TRUE',
    'False',
    'x',
    '1.5',
    '-7',
    ' 42 ',
    '12n',
    '0x10',
    '1e3',
    '9007199254740993',
    'null',
    'undefined',
    'info',
    'loud',
    'postgres://u@h/db',
    'mysql://x',
    'https://up.example',
    'a-webhook-secret-long-enough',
    '~/a',
  ),
  fc.constantFrom(0, 1, -1, 1.5, 70_000, 65_535, Number.NaN, Number.POSITIVE_INFINITY),
  fc.constantFrom(true, false, null, undefined, 1n, 0n, 2n),
  fc.string({ maxLength: 4 }),
  fc.integer({ min: -5, max: 100_000 }),
)

function valueFor(node: Node, depth: number): fc.Arbitrary<unknown> {
  if (node.type === 'array') {
    const item = fc.oneof(
      scalar,
      fc.constantFrom('https://a.example', 'http://b.example:8080', 'x-real-ip', '10.0.0.0/8'),
    )
    return fc.oneof({ arbitrary: fc.array(item, { maxLength: 3 }), weight: 4 }, scalar)
  }
  if (node.type !== 'object' || depth > 3) return scalar
  const known = Object.fromEntries(
    Object.entries(node.properties ?? {}).map(([key, child]) => [key, valueFor(child, depth + 1)]),
  )
  const object = fc
    .tuple(
      fc.record(known, { requiredKeys: [] }),
      fc.dictionary(fc.constantFrom('bogus', 'a/b', 'x~y', 'constructor', 'toString'), scalar, {
        maxKeys: 2,
      }),
      fc.boolean(),
    )
    .map(([fields, extra, withExtra]) => (withExtra ? { ...fields, ...extra } : fields))
  return fc.oneof(
    { arbitrary: object, weight: 8 },
    { arbitrary: scalar, weight: 1 },
    fc.array(scalar, { maxLength: 2 }),
  )
}

const plain = (errors: readonly object[]) =>
  errors.map((e) => {
    const { keyword, instancePath, params, message } = e as Record<string, unknown>
    return { keyword, instancePath, params, message }
  })

describe('config json-schema engine', () => {
  const before = Settings.Get().maxErrors
  Settings.Set({ maxErrors: 100_000 }) // the engine reports every error; so must the reference
  after(() => Settings.Set({ maxErrors: before }))

  it('converts, defaults and reports errors exactly as TypeBox does', () => {
    fc.assert(
      fc.property(valueFor(ConfigSchema as unknown as Node, 0), (input) => {
        const ours = applyDefaults(ConfigSchema, convert(ConfigSchema, structuredClone(input)))
        const theirs = Value.Default(reference, Value.Convert(reference, structuredClone(input)))
        assert.deepEqual(ours, theirs)
        assert.deepEqual(
          plain(validationErrors(ConfigSchema, ours)),
          plain(Value.Errors(reference, theirs)),
        )
      }),
      { numRuns: 400 },
    )
  })

  it('builds the same JSON Schema as TypeBox, key order and optional markers included', () => {
    const sample = Type.Object(
      {
        a: Type.Optional(Type.String({ pattern: '^x', description: 'd' })),
        b: Type.Integer({ default: 1, minimum: 0 }),
        c: Type.Union([Type.Literal('p'), Type.Literal('q')], { default: 'p' }),
      },
      { default: {}, additionalProperties: false },
    )
    const same = TypeBox.Object(
      {
        a: TypeBox.Optional(TypeBox.String({ pattern: '^x', description: 'd' })),
        b: TypeBox.Integer({ default: 1, minimum: 0 }),
        c: TypeBox.Union([TypeBox.Literal('p'), TypeBox.Literal('q')], { default: 'p' }),
      },
      { default: {}, additionalProperties: false },
    )
    assert.equal(JSON.stringify(sample), JSON.stringify(same))
    assert.equal(optional(sample.properties.a as unknown as Node), true)
    assert.equal(optional(sample.properties.b as unknown as Node), false)
  })

  it('refuses a keyword it does not implement, rather than ignoring it', () => {
    assert.throws(() => Type.String({ format: 'uri' } as never), /unsupported keyword 'format'/)
    assert.throws(
      () => validationErrors({ type: 'number' } as Schema, 1),
      /unsupported type 'number'/,
    )
  })

  it('reports every problem, not only the first eight', () => {
    const env = {
      TOKENGATE_DEV: 'true',
      TOKENGATE_PORT: 'a',
      TOKENGATE_METRICS_PORT: 'b',
      TOKENGATE_LOG_LEVEL: 'loud',
      DATABASE_URL: 'mysql://x',
      REDIS_URL: 'memcached://x',
    }
    const overrides = {
      auth: { clockToleranceSec: 301, jwksTimeoutMs: 0 },
      pagination: { defaultLimit: 0 },
      events: { batchSize: 1001 },
      extra: true,
    }
    try {
      loadConfig({ env, overrides })
      assert.fail('expected a ConfigError')
    } catch (error) {
      assert.ok(error instanceof ConfigError)
      assert.deepEqual(error.problems, [
        '/extra: unknown setting',
        '/databaseUrl: must be a postgres:// or postgresql:// URL (from the environment variable DATABASE_URL; fix or unset it)',
        '/redisUrl: must be a redis://, rediss://, redis-sentinel:// or redis-cluster:// URL (from the environment variable REDIS_URL; fix or unset it)',
        '/server/port: must be integer (from the environment variable TOKENGATE_PORT; fix or unset it)',
        '/auth/clockToleranceSec: must be <= 300',
        '/auth/jwksTimeoutMs: must be >= 1',
        '/events/batchSize: must be <= 1000',
        '/metrics/port: must be integer (from the environment variable TOKENGATE_METRICS_PORT; fix or unset it)',
        '/pagination/defaultLimit: must be >= 1',
        '/log/level: must be one of "fatal", "error", "warn", "info", "debug", "trace", "silent" (from the environment variable TOKENGATE_LOG_LEVEL; fix or unset it)',
      ])
    }
  })
})
