/**
 * The one reading of a request target's path that every policy decision is made on.
 *
 * A route policy is only as good as the agreement between the gateway and the upstream about
 * which resource a path names. So a path is either read in one unambiguous way (each segment
 * percent-decoded once) or refused: every spelling that two HTTP stacks are known to read
 * differently is a refusal, never a normalisation the upstream did not ask for.
 */

/** A path read one way: `ok` with its decoded segments, or the reason it is refused. */
export type RequestTarget =
  | {
      readonly ok: true
      /** `/` + the decoded segments joined by `/` (one trailing slash dropped). */
      readonly path: string
      readonly segments: readonly string[]
    }
  | { readonly ok: false; readonly reason: string }

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const CONTROL = /[\x00-\x1f\x7f]/
/** Checked after CONTROL, so what it finds is non-ASCII. */
const NON_ASCII = /[^\x20-\x7e]/
const PRINTABLE = /^[\x20-\x7e]*$/
const SUSPICIOUS_SEGMENT = /\/\/|[. ](?:\/|$)/

/**
 * Reads the path of `target` (origin-form; a query string is ignored). Refused:
 * - anything but an absolute path; a backslash, raw or encoded; an encoded `/`;
 * - `;` raw or encoded: Tomcat, Jetty and Spring strip `;params` from a segment and then
 *   resolve `..`, so `/public/..;/admin` is `/admin` to them;
 * - `.` and `..` segments, and any segment ending in `.` or a space after decoding
 *   (Windows and IIS-style lookups drop those, `/admin.` is `/admin`);
 * - an empty segment (`//`), invalid percent-encoding, control characters;
 * - non-ASCII after decoding: Unicode case mapping differs between stacks (the dotless `ı`
 *   upper-cases to `I`, so a case-insensitive Java router reads `/ınternal` as `/internal`).
 *
 * @example
 * canonicalRequestTarget('/api/v%31/me?x=1') // { ok: true, path: '/api/v1/me', segments: [...] }
 * canonicalRequestTarget('/api/v1/me;x')     // { ok: false, reason: 'the path contains ;...' }
 */
export function canonicalRequestTarget(target: string): RequestTarget {
  const q = target.indexOf('?')
  const raw = q === -1 ? target : target.slice(0, q)
  if (!raw.startsWith('/')) return refuse('the path must start with /')
  if (raw.includes('\\')) return refuse('the path contains a backslash')
  if (raw.includes(';')) return refuse('the path contains ; (path parameters are not accepted)')
  // Without percent-encoding and with printable ASCII only, no segment can hold a control or
  // non-ASCII character: the common path skips those two tests per segment.
  const plain = !raw.includes('%') && PRINTABLE.test(raw)
  const parts = raw.slice(1).split('/')
  if (parts[parts.length - 1] === '') parts.pop()
  // A plain path without `//` and without a segment ending in `.` or a space (which covers
  // `.` and `..`) passes every test below as it is.
  if (plain && !SUSPICIOUS_SEGMENT.test(raw)) {
    const path = raw.length > 1 && raw.endsWith('/') ? raw.slice(0, -1) : raw
    return { ok: true, path, segments: parts }
  }
  const segments: string[] = []
  for (const part of parts) {
    let segment = part
    if (!plain && part.includes('%')) {
      try {
        segment = decodeURIComponent(part)
      } catch {
        return refuse('the path contains invalid percent-encoding')
      }
      if (segment.includes('/') || segment.includes('\\')) {
        return refuse('the path contains an encoded / or \\')
      }
      if (segment.includes(';')) {
        return refuse('the path contains ; (path parameters are not accepted)')
      }
    }
    if (segment === '') return refuse('the path contains an empty segment (//)')
    if (segment === '.' || segment === '..') return refuse('the path contains a . or .. segment')
    if (segment.endsWith('.') || segment.endsWith(' ')) {
      return refuse('a path segment ends with . or a space')
    }
    if (!plain) {
      if (CONTROL.test(segment)) return refuse('the path contains control characters')
      if (NON_ASCII.test(segment)) return refuse('the path contains non-ASCII characters')
    }
    segments.push(segment)
  }
  return { ok: true, path: `/${segments.join('/')}`, segments }
}

/** ASCII-only lower-casing: `İ`, `K` (Kelvin) and friends stay what they are. */
export function asciiLowerCase(value: string): string {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i)
    if (code >= 0x41 && code <= 0x5a)
      return value.replace(/[A-Z]+/g, (upper) => upper.toLowerCase())
  }
  return value
}

function refuse(reason: string): RequestTarget {
  return { ok: false, reason }
}
