/**
 * Raw HTTP/1.1 requests for the gateway's attack tests: the path and header names are sent
 * exactly as written (fetch would normalise `..`, and refuses some header spellings).
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http'

export interface RawResponse {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  readonly text: string
}

/**
 * Sends one request; `headers` is a list of [name, value] pairs, kept in order and spelling.
 * `localAddress`: the address the connection comes from (any of 127/8 on Linux).
 */
export function rawRequest(
  base: string,
  path: string,
  headers: ReadonlyArray<readonly [string, string]>,
  method = 'GET',
  options: { readonly localAddress?: string } = {},
): Promise<RawResponse> {
  const url = new URL(base)
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: url.hostname,
      port: url.port,
      method,
      path,
      localAddress: options.localAddress,
      // A raw header list replaces Node's defaults, Host included.
      headers: [['Host', url.host] as const, ...headers].flat(),
      agent: false,
    })
    req.on('error', reject)
    req.on('response', (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          text: Buffer.concat(chunks).toString('utf8'),
        }),
      )
      res.on('error', reject)
    })
    req.end()
  })
}
