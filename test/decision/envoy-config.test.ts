/**
 * The shipped Envoy configurations (examples/forward-auth/envoy.yaml, envoy-http.yaml) decode
 * as `envoy.config.bootstrap.v3.Bootstrap` against Envoy's own protos (vendor/envoy-protos/):
 * no Envoy binary can run here, so the shape is checked the way Envoy's loader reads YAML,
 * the proto3 JSON mapping, strictly. Every key must be a field of its message (proto or
 * lowerCamelCase name), every `typed_config` must name a loaded type by `@type` and match
 * it, enums must be values of their enum, at most one field per oneof, every field marked
 * `(validate.rules).message.required` present, and no field Envoy has deprecated.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { describe, test } from 'node:test'
import protobuf from 'protobufjs'
import { parse } from 'yaml'
import { PROTO_DIR } from '../../src/decision/envoy-grpc.ts'

const EXAMPLES = join(import.meta.dirname, '../../examples/forward-auth')
const PROTOBUFJS = dirname(createRequire(import.meta.url).resolve('protobufjs/package.json'))

const ROOTS = [
  'envoy/config/bootstrap/v3/bootstrap.proto',
  'envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto',
  'envoy/extensions/filters/http/ext_authz/v3/ext_authz.proto',
  'envoy/extensions/filters/http/router/v3/router.proto',
  'envoy/extensions/upstreams/http/v3/http_protocol_options.proto',
]

function loadRoot(): protobuf.Root {
  const root = new protobuf.Root()
  root.resolvePath = (_origin, target) =>
    target.startsWith('google/protobuf/') ? join(PROTOBUFJS, target) : join(PROTO_DIR, target)
  root.loadSync(ROOTS, { keepCase: true })
  root.resolveAll()
  return root
}

const camel = (name: string) => name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase())

const INTEGER = /^-?\d+$/
const SCALARS: Record<string, (value: unknown) => boolean> = {
  string: (v) => typeof v === 'string',
  bytes: (v) => typeof v === 'string',
  bool: (v) => typeof v === 'boolean',
  double: (v) => typeof v === 'number',
  float: (v) => typeof v === 'number',
}
const isInteger = (v: unknown) =>
  (typeof v === 'number' && Number.isInteger(v)) || (typeof v === 'string' && INTEGER.test(v))

/** Well-known types in their JSON forms. */
const WELL_KNOWN: Record<string, (value: unknown) => boolean> = {
  '.google.protobuf.Duration': (v) => typeof v === 'string' && /^-?\d+(\.\d{1,9})?s$/.test(v),
  '.google.protobuf.Timestamp': (v) => typeof v === 'string',
  '.google.protobuf.Struct': (v) => typeof v === 'object' && v !== null && !Array.isArray(v),
  '.google.protobuf.Value': () => true,
  '.google.protobuf.ListValue': (v) => Array.isArray(v),
  '.google.protobuf.Empty': (v) =>
    typeof v === 'object' && v !== null && Object.keys(v).length === 0,
  '.google.protobuf.BoolValue': (v) => typeof v === 'boolean',
  '.google.protobuf.StringValue': (v) => typeof v === 'string',
  '.google.protobuf.UInt32Value': isInteger,
  '.google.protobuf.UInt64Value': isInteger,
  '.google.protobuf.Int32Value': isInteger,
  '.google.protobuf.Int64Value': isInteger,
  '.google.protobuf.DoubleValue': (v) => typeof v === 'number',
}

/** `[(validate.rules).message = {required: true}]` on a field outside any oneof. */
function isRequired(field: protobuf.Field): boolean {
  if (field.partOf) return false
  const options = (field.options ?? {}) as Record<string, unknown>
  if (options['(validate.rules).message.required'] === true) return true
  const parsed = (field.parsedOptions ?? []) as Record<
    string,
    { message?: { required?: boolean } }
  >[]
  return parsed.some((option) => option['(validate.rules)']?.message?.required === true)
}

/** `option (validate.required) = true` inside a oneof: one of its fields must be set. */
function isRequiredOneof(oneof: protobuf.OneOf): boolean {
  return (oneof.options as Record<string, unknown> | undefined)?.['(validate.required)'] === true
}

/** Every way `value` fails to decode as `type`, as `path: reason`. */
function problems(
  root: protobuf.Root,
  type: protobuf.Type,
  value: unknown,
  path: string,
): string[] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return [`${path}: not a ${type.fullName} object`]
  }
  const found: string[] = []
  let fields = type
  let entries = Object.entries(value)
  if (type.fullName === '.google.protobuf.Any') {
    const url = (value as Record<string, unknown>)['@type']
    const name = typeof url === 'string' ? url.replace(/^type\.googleapis\.com\//, '') : ''
    const resolved = name ? root.lookup(name) : null
    if (!(resolved instanceof protobuf.Type)) return [`${path}: @type ${String(url)} is not loaded`]
    fields = resolved
    entries = entries.filter(([key]) => key !== '@type')
  }
  const byName = new Map<string, protobuf.Field>()
  for (const field of fields.fieldsArray) {
    byName.set(field.name, field)
    byName.set(camel(field.name), field)
  }
  const oneofsUsed = new Map<string, string>()
  for (const [key, item] of entries) {
    const field = byName.get(key)
    const at = `${path}.${key}`
    if (!field) {
      found.push(`${at}: no such field in ${fields.fullName}`)
      continue
    }
    if ((field.options as Record<string, unknown> | undefined)?.deprecated === true) {
      found.push(`${at}: deprecated in ${fields.fullName}`)
    }
    if (field.partOf) {
      const other = oneofsUsed.get(field.partOf.name)
      if (other) found.push(`${at}: oneof ${field.partOf.name} already set by ${other}`)
      oneofsUsed.set(field.partOf.name, key)
    }
    if (field.map) {
      if (typeof item !== 'object' || item === null) found.push(`${at}: not a map`)
      else
        for (const [k, v] of Object.entries(item))
          found.push(...single(root, field, v, `${at}.${k}`))
    } else if (field.repeated) {
      if (!Array.isArray(item)) found.push(`${at}: not a list`)
      else found.push(...item.flatMap((v, i) => single(root, field, v, `${at}[${i}]`)))
    } else {
      found.push(...single(root, field, item, at))
    }
  }
  const present = new Set(entries.map(([key]) => byName.get(key)))
  for (const field of fields.fieldsArray) {
    if (isRequired(field) && !present.has(field)) {
      found.push(`${path}: ${fields.fullName}.${field.name} is required`)
    }
  }
  for (const oneof of fields.oneofsArray) {
    if (isRequiredOneof(oneof) && !oneofsUsed.has(oneof.name)) {
      found.push(`${path}: one of ${fields.fullName}.${oneof.name} is required`)
    }
  }
  return found
}

function single(root: protobuf.Root, field: protobuf.Field, value: unknown, at: string): string[] {
  const resolved = field.resolvedType
  if (resolved instanceof protobuf.Enum) {
    const ok = typeof value === 'string' ? value in resolved.values : Number.isInteger(value)
    return ok ? [] : [`${at}: ${String(value)} is not a ${resolved.fullName}`]
  }
  if (resolved instanceof protobuf.Type) {
    const wellKnown = WELL_KNOWN[resolved.fullName]
    if (wellKnown) return wellKnown(value) ? [] : [`${at}: not a ${resolved.fullName}`]
    return problems(root, resolved, value, at)
  }
  const check = SCALARS[field.type] ?? isInteger
  return check(value) ? [] : [`${at}: not a ${field.type}`]
}

describe('the shipped Envoy configurations against Envoy’s config protos', () => {
  const root = loadRoot()
  const bootstrap = root.lookupType('envoy.config.bootstrap.v3.Bootstrap')

  for (const file of ['envoy.yaml', 'envoy-http.yaml']) {
    test(`${file} decodes as envoy.config.bootstrap.v3.Bootstrap`, () => {
      const config = parse(readFileSync(join(EXAMPLES, file), 'utf8'))
      assert.deepEqual(problems(root, bootstrap, config, file), [])
    })
  }

  test('the check is strict: a misspelt field, an unknown @type, a bad enum, a missing required field', () => {
    const config = parse(readFileSync(join(EXAMPLES, 'envoy.yaml'), 'utf8'))
    const listener = config.static_resources.listeners[0]
    const manager = listener.filter_chains[0].filters[0].typed_config
    manager.http_filters[0].typed_config.failure_mode_alow = true
    manager.http_filters[1].typed_config['@type'] = 'type.googleapis.com/envoy.Nope'
    manager.path_with_escaped_slashes_action = 'MAYBE'
    delete manager.route_config.virtual_hosts[0].routes[0].match.prefix
    const options = config.static_resources.clusters[0].typed_extension_protocol_options
    delete options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'].explicit_http_config
      .http2_protocol_options
    config.static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint = {
      address: { socket_address: { address: '127.0.0.1', port_value: 'x' } },
    }
    const found = problems(root, bootstrap, config, 'envoy.yaml').join('\n')
    assert.match(found, /failure_mode_alow: no such field/)
    assert.match(found, /@type type\.googleapis\.com\/envoy\.Nope is not loaded/)
    assert.match(found, /MAYBE is not a/)
    assert.match(found, /port_value: not a uint32/)
    assert.match(found, /one of \.envoy\.config\.route\.v3\.RouteMatch\.path_specifier is required/)
    assert.match(found, /one of .*ExplicitHttpConfig\.protocol_config is required/)
  })
})
