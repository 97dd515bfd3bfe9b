import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import Type from 'typebox'
import {
  array,
  integer,
  literals,
  nullable,
  object,
  optional,
  record,
  string,
} from '../../../src/server/routes/v1/schemas.ts'

/**
 * The route schemas were TypeBox's until start-up time (issue #6) replaced it with these
 * builders; the OpenAPI document and Fastify's validators depend on the exact JSON, so each
 * builder is compared with TypeBox's output as text (key order included).
 */
const same = (ours: unknown, typebox: unknown) =>
  assert.equal(JSON.stringify(ours), JSON.stringify(typebox))

describe('route schema builders', () => {
  it('emit the JSON Schema TypeBox emits, key order included', () => {
    same(string(), Type.String())
    same(string({ format: 'uri' }), Type.String({ format: 'uri' }))
    same(
      string({ minLength: 1, maxLength: 512, description: 'd' }),
      Type.String({ minLength: 1, maxLength: 512, description: 'd' }),
    )
    same(integer({ minimum: 1, description: 'd' }), Type.Integer({ minimum: 1, description: 'd' }))
    same(array(string()), Type.Array(Type.String()))
    same(
      literals('a', 'b', 'c'),
      Type.Union([Type.Literal('a'), Type.Literal('b'), Type.Literal('c')]),
    )
    same(
      nullable(string({ format: 'date-time' })),
      Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    )
    same(record(), Type.Record(Type.String(), Type.Unknown()))
  })

  it('objects: required from the non-optional properties (none: omitted), then the options', () => {
    same(
      object(
        { a: string(), b: optional(integer()), c: nullable(string()) },
        { $id: 'X', additionalProperties: true, description: 'd' },
      ),
      Type.Object(
        {
          a: Type.String(),
          b: Type.Optional(Type.Integer()),
          c: Type.Union([Type.String(), Type.Null()]),
        },
        { $id: 'X', additionalProperties: true, description: 'd' },
      ),
    )
    same(
      object({ a: optional(string()) }, { additionalProperties: false }),
      Type.Object({ a: Type.Optional(Type.String()) }, { additionalProperties: false }),
    )
    same(
      object({}, { additionalProperties: true }),
      Type.Object({}, { additionalProperties: true }),
    )
  })

  it('optional leaves the property schema itself unchanged in JSON', () => {
    const base = string({ minLength: 1 })
    same(optional(base), base)
    assert.equal(Object.keys(optional(base)).includes('~optional'), false)
  })
})
