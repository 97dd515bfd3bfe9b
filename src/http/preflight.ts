import { isPreflight } from './cors.ts'

/**
 * The one preflight rule of every binding (DESIGN "Browsers"): a CORS preflight carries no
 * credentials by design (Fetch standard), so under the gated prefix it is never
 * authenticated and never counts as a failed authentication. `answer` (the default): an
 * empty 204, which a browser reads as a refusal unless CORS headers were added before (the
 * server's CORS plugin answers a configured origin first); `pass`: handed on unchecked to the
 * app, whose own CORS handling answers it. Outside the prefix a preflight is the app's.
 */
export type PreflightRule = 'answer' | 'pass'

/** The answer of `answer`: 204, no body. */
export const PREFLIGHT_ANSWER = { status: 204, headers: { 'content-length': '0' } } as const

/** Whether a request is a CORS preflight: `OPTIONS` with `Origin` and a requested method. */
export function isPreflightOf(
  method: string | undefined,
  header: (name: string) => string | string[] | null | undefined,
): boolean {
  if (method !== 'OPTIONS') return false
  const origin = header('origin')
  const requested = header('access-control-request-method')
  return isPreflight(
    method,
    typeof origin === 'string' ? origin : undefined,
    typeof requested === 'string' ? requested : undefined,
  )
}
