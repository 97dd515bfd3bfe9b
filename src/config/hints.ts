/**
 * What a configuration problem says beyond the validator's words: the flag and variable that
 * set a missing value, "an http(s) URL" instead of a regular expression, the setting an
 * unknown key or `TOKENGATE_*` variable was probably meant to be.
 */
import { ConfigSchema } from './schema.ts'

/** The command-line flags that set a setting (`serve` and the global options). */
const FLAGS: Readonly<Record<string, string>> = {
  '/dataDir': '--data-dir DIR',
  '/databaseUrl': '--database-url URL',
  '/server/host': '--listen HOST:PORT',
  '/server/port': '--listen HOST:PORT',
  '/server/plainHttp': '--http',
  '/gateway/upstream': '--upstream URL',
  '/gateway/policyFile': '--policy FILE',
  '/dev': '--dev',
}

/** Schema patterns in words. */
const PATTERNS: Readonly<Record<string, string>> = {
  '^https?://': 'must be an http(s) URL (http://… or https://…)',
  '^https://': 'must be an https:// URL',
  '^https?://[^/\\s,]+$': 'must be an origin: http(s)://host[:port], no path',
  '^postgres(ql)?://': 'must be a postgres:// or postgresql:// URL',
  '^rediss?(-sentinel|-cluster)?://':
    'must be a redis://, rediss://, redis-sentinel:// or redis-cluster:// URL',
  '^(/[^/?#]+)*$': 'must be empty or a path like /ext-authz (no trailing /, ?, #)',
  '^[a-z0-9-]+$': 'must be lower-case letters, digits and -',
}

/** `/gateway/upstream` -> `gateway.upstream`. */
const dotted = (pointer: string) => pointer.slice(1).replaceAll('/', '.')

/** How to set the setting at `pointer`: its flag, its variable, the config file key. */
export function howToSet(pointer: string, env: Readonly<Record<string, string>>): string {
  const ways = [
    FLAGS[pointer],
    Object.entries(env).find(([, path]) => path === dotted(pointer))?.[0],
    `${dotted(pointer)} in the config file`,
  ].filter((way): way is string => way !== undefined)
  return ways.join(', ')
}

/** A `pattern` failure in words, or undefined when the pattern has none. */
export function patternInWords(pattern: unknown): string | undefined {
  return typeof pattern === 'string' ? PATTERNS[pattern] : undefined
}

/** The settings beside the one at `pointer` (its siblings in the schema). */
function siblings(pointer: string): string[] {
  let node = ConfigSchema as unknown as { properties?: Record<string, unknown> }
  const parts = pointer.split('/').slice(1, -1)
  for (const part of parts) {
    const next = node.properties?.[part] as typeof node | undefined
    if (!next) return []
    node = next
  }
  return Object.keys(node.properties ?? {})
}

/** ` (did you mean server.port?)` for an unknown key close to a known one, else ''. */
export function didYouMeanSetting(pointer: string): string {
  const name = pointer.split('/').at(-1) ?? ''
  const match = closest(name, siblings(pointer))
  if (match === undefined) return ''
  return ` (did you mean ${dotted(`${pointer.split('/').slice(0, -1).join('/')}/${match}`)}?)`
}

/**
 * `TOKENGATE_*` variables that are not tokengate's: a misspelt one is otherwise ignored in
 * silence. One warning each, with the variable it was probably meant to be.
 */
export function unknownVariables(
  env: Readonly<Record<string, string | undefined>>,
  known: readonly string[],
): string[] {
  const names = new Set(known)
  return Object.keys(env)
    .filter((name) => name.startsWith('TOKENGATE_') && !names.has(name) && env[name] !== undefined)
    .filter((name) => !IGNORED.has(name))
    .sort()
    .map((name) => {
      const match = closest(name, known)
      return `${name} is not a tokengate variable and is ignored${match ? ` (did you mean ${match}?)` : ''}`
    })
}

/** Variables of tokengate's own test and packaging tools, not settings. */
const IGNORED = new Set([
  'TOKENGATE_TEST_PACKAGE',
  'TOKENGATE_PACKAGE_ROOT',
  'TOKENGATE_DOCS',
  'TOKENGATE_IMAGE',
  'TOKENGATE_REBUILD_BASE',
])

/** The candidate within a small edit distance (or differing only in case), if one is. */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined
  let bestDistance = Number.POSITIVE_INFINITY
  const lower = word.toLowerCase()
  for (const candidate of candidates) {
    const distance =
      candidate.toLowerCase() === lower ? 0 : editDistance(lower, candidate.toLowerCase())
    if (distance < bestDistance) {
      best = candidate
      bestDistance = distance
    }
  }
  const allowed = Math.max(1, Math.min(3, Math.floor(word.length / 4)))
  return bestDistance <= allowed ? best : undefined
}

/** Edits between `a` and `b`; a swap of two neighbours is one edit (prot -> port). */
function editDistance(a: string, b: string): number {
  let before: number[] = []
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i)
  for (let i = 1; i <= a.length; i++) {
    const current = [i]
    for (let j = 1; j <= b.length; j++) {
      let best = Math.min(
        (previous[j] as number) + 1,
        (current[j - 1] as number) + 1,
        (previous[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1),
      )
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, (before[j - 2] as number) + 1)
      }
      current.push(best)
    }
    before = previous
    previous = current
  }
  return previous[b.length] as number
}
