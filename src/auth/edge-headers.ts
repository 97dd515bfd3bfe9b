/**
 * The four headers the edge (edge.ts) reads off every gated request, in one pass over Node's
 * `rawHeaders` and with one object (issue #36: it read them in three passes with an array
 * per header). Names match as core/raw-headers.ts matches them: ASCII case-insensitively,
 * never through `toLowerCase` (which maps U+212A KELVIN SIGN onto `k`).
 */
import { equalsAsciiLowercase } from '../core/raw-headers.ts'

/** What one pass over a request's raw headers found. */
export interface EdgeHeaders {
  /** Every `Authorization` value, in arrival order (two are refused, not resolved). */
  readonly authorization: readonly string[]
  /** Every `X-Tenant-Id` value, in arrival order. */
  readonly tenantIds: readonly string[]
  /** The first `X-Request-Id` value (http/request-id.ts decides whether it is used). */
  readonly requestId: string | undefined
  /** The first `Content-Type` value (the form-body check). */
  readonly contentType: string | undefined
}

// No header of a name: one shared empty list. One: an array of exactly it (`[]` then `push`
// would allocate room for 17), as most requests send one `Authorization` and no tenant id.
const NONE: readonly string[] = Object.freeze([])

export function readEdgeHeaders(rawHeaders: readonly string[]): EdgeHeaders {
  let authorization: string[] | undefined
  let tenantIds: string[] | undefined
  let requestId: string | undefined
  let contentType: string | undefined
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string
    // The length picks the one name to compare with: no other name is tried.
    switch (name.length) {
      case 13:
        if (equalsAsciiLowercase(name, 'authorization')) {
          authorization = added(authorization, rawHeaders[i + 1] as string)
        }
        break
      case 11:
        if (equalsAsciiLowercase(name, 'x-tenant-id')) {
          tenantIds = added(tenantIds, rawHeaders[i + 1] as string)
        }
        break
      case 12:
        if (requestId === undefined && equalsAsciiLowercase(name, 'x-request-id')) {
          requestId = rawHeaders[i + 1] as string
        } else if (contentType === undefined && equalsAsciiLowercase(name, 'content-type')) {
          contentType = rawHeaders[i + 1] as string
        }
        break
    }
  }
  return {
    authorization: authorization ?? NONE,
    tenantIds: tenantIds ?? NONE,
    requestId,
    contentType,
  }
}

function added(values: string[] | undefined, value: string): string[] {
  if (values === undefined) return [value]
  values.push(value)
  return values
}
