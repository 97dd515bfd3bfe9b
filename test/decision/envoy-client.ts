/**
 * A grpc-js client of Envoy's ext_authz Authorization service (the vendored protos), asking
 * tokengate's decision gRPC listener as Envoy asks it; requests from envoy-check-requests.ts.
 *
 * @example
 * const envoy = connectEnvoyAuthorization<{ http_response: string }>(stack.grpcUrl as string)
 * try { (await envoy.check(checkRequest('GET', '/api/v1/things', lines))).http_response }
 * finally { envoy.close() }
 */
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import { CHECK_PROTO, PROTO_OPTIONS } from '../../src/decision/envoy-grpc.ts'

export interface EnvoyAuthorization<Response> {
  /** One Check call; rejects on a gRPC error (CANCELLED once `signal` aborts it, as Envoy cancels). */
  check(request: object, signal?: AbortSignal): Promise<Response>
  close(): void
}

/**
 * Connects to `url` (the listener's `http://host:port`). `numericEnums`: enum fields
 * (a denied response's status code) as numbers, not names.
 */
export function connectEnvoyAuthorization<Response>(
  url: string,
  options: { readonly numericEnums?: boolean } = {},
): EnvoyAuthorization<Response> {
  const loadOptions = options.numericEnums ? { ...PROTO_OPTIONS, enums: Number } : PROTO_OPTIONS
  const loaded = grpc.loadPackageDefinition(protoLoader.loadSync(CHECK_PROTO, loadOptions))
  const { Authorization } = (
    loaded as unknown as {
      envoy: { service: { auth: { v3: { Authorization: grpc.ServiceClientConstructor } } } }
    }
  ).envoy.service.auth.v3
  const client = new Authorization(
    new URL(url).host,
    grpc.credentials.createInsecure(),
  ) as unknown as grpc.Client & {
    Check(
      request: object,
      callback: (error: Error | null, response: Response) => void,
    ): grpc.ClientUnaryCall
  }
  return {
    check: (request, signal) =>
      new Promise((resolve, reject) => {
        const call = client.Check(request, (error, response) =>
          error ? reject(error) : resolve(response),
        )
        signal?.addEventListener('abort', () => call.cancel(), { once: true })
      }),
    close: () => client.close(),
  }
}
