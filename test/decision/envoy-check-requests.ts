/**
 * CheckRequests as Envoy's ext_authz filter sends them to a gRPC authorization service, for
 * the tests' gRPC client (a grpc-js client of the vendored protos, vendor/envoy-protos/).
 *
 * The shape is Envoy's: AttributeContext filled by
 * source/extensions/filters/common/ext_authz/check_request_utils.cc (envoyproxy/envoy):
 * `source`/`destination` peers with socket addresses, `request.time`, and `request.http`
 * with `id` (the stream id), `method`, `path` (the request target as received, query
 * included), `host`, `scheme`, `protocol`, `size`, and the headers: the `headers` map with
 * lower-case names, pseudo-headers included, duplicates merged with "," (Envoy's
 * test/extensions/filters/http/ext_authz/ext_authz_integration_test.cc expects
 * `x-duplicate: "one,two,three"`), or, with `encode_raw_headers: true` (as
 * examples/forward-auth/envoy.yaml sets it), `header_map` instead, duplicates kept apart,
 * values as `raw_value` bytes. Field docs: envoy/service/auth/v3/attribute_context.proto.
 */

/** One request exactly as Envoy 1.3x encodes it for `GET /api/v1/things?page=2` (HTTP/1.1). */
export const ENVOY_CHECK_REQUEST = {
  attributes: {
    source: {
      address: { socket_address: { address: '203.0.113.9', port_value: 52814 } },
    },
    destination: {
      address: { socket_address: { address: '10.0.0.5', port_value: 8080 } },
    },
    request: {
      time: { seconds: '1767225600', nanos: 125000000 },
      http: {
        id: '9431650498223427325',
        method: 'GET',
        headers: {
          ':authority': 'api.example.com',
          ':method': 'GET',
          ':path': '/api/v1/things?page=2',
          ':scheme': 'https',
          accept: '*/*',
          'user-agent': 'curl/8.5.0',
          'x-forwarded-proto': 'https',
          'x-request-id': '0f6cd1f2-3c5b-4b63-9bd8-b1d1e1f9a3c7',
        },
        path: '/api/v1/things?page=2',
        host: 'api.example.com',
        scheme: 'https',
        protocol: 'HTTP/1.1',
        size: '0',
      },
    },
    metadata_context: {},
    route_metadata_context: {},
  },
}

export interface CheckOptions {
  /** `encode_raw_headers: true`: `header_map`, duplicates apart. Default: the merged map. */
  readonly raw?: boolean
  readonly source?: string
  readonly host?: string
}

/** The same request for another method, target and client header lines. */
export function checkRequest(
  method: string,
  path: string,
  lines: readonly (readonly [string, string])[],
  options: CheckOptions = {},
): typeof ENVOY_CHECK_REQUEST | Record<string, unknown> {
  const base = ENVOY_CHECK_REQUEST.attributes
  const host = options.host ?? base.request.http.host
  const pseudo: [string, string][] = [
    [':authority', host],
    [':method', method],
    [':path', path],
    [':scheme', 'https'],
  ]
  const all: [string, string][] = [
    ...pseudo,
    ['accept', '*/*'],
    ['user-agent', 'curl/8.5.0'],
    ['x-forwarded-proto', 'https'],
    ['x-request-id', base.request.http.headers['x-request-id']],
    ...lines.map(([name, value]): [string, string] => [name.toLowerCase(), value]),
  ]
  const merged: Record<string, string> = {}
  for (const [name, value] of all) {
    merged[name] = merged[name] === undefined ? value : `${merged[name]},${value}`
  }
  const http = {
    ...base.request.http,
    method,
    path,
    host,
    ...(options.raw
      ? {
          headers: undefined,
          header_map: {
            headers: all.map(([key, value]) => ({ key, raw_value: Buffer.from(value, 'latin1') })),
          },
        }
      : { headers: merged }),
  }
  return {
    attributes: {
      ...base,
      source: {
        address: {
          socket_address: { address: options.source ?? '203.0.113.9', port_value: 52814 },
        },
      },
      request: { ...base.request, http },
    },
  }
}
