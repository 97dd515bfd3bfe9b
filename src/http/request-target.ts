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
const SLASH = 0x2f
const BACKSLASH = 0x5c
const SEMICOLON = 0x3b
const PERCENT = 0x25
const DOT = 0x2e
const SPACE = 0x20
const TILDE = 0x7e

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
  const length = q === -1 ? target.length : q
  if (length === 0 || target.charCodeAt(0) !== SLASH) return refuse('the path must start with /')
  // One pass over the path: its segments as written, and what the tests below look for. A
  // plain path (printable ASCII, no `%`) cannot hold a control or non-ASCII character, and
  // without `//` and a segment ending in `.` or a space (which covers `.` and `..`) it passes
  // every per-segment test as it is.
  const parts: string[] = []
  let backslash = false
  let semicolon = false
  let plain = true
  let suspicious = false
  let start = 1
  for (let i = 1; i < length; i++) {
    const c = target.charCodeAt(i)
    if (c === SLASH) {
      const before = target.charCodeAt(i - 1)
      if (before === SLASH || before === DOT || before === SPACE) suspicious = true
      parts.push(target.slice(start, i))
      start = i + 1
    } else if (c === BACKSLASH) backslash = true
    else if (c === SEMICOLON) semicolon = true
    else if (c === PERCENT || c < SPACE || c > TILDE) plain = false
  }
  if (backslash) return refuse('the path contains a backslash')
  if (semicolon) return refuse('the path contains ; (path parameters are not accepted)')
  const last = target.charCodeAt(length - 1)
  if (length > 1 && (last === DOT || last === SPACE)) suspicious = true
  // The last segment; a trailing slash ends the path (`/a/` is `/a`), its empty segment dropped.
  if (start < length) parts.push(target.slice(start, length))
  if (plain && !suspicious) {
    const end = length > 1 && last === SLASH ? length - 1 : length
    return {
      ok: true,
      path: end === target.length ? target : target.slice(0, end),
      segments: parts,
    }
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
