import { readFileSync } from 'node:fs'

/**
 * An optional package a feature needs (`pg` for Postgres, `ioredis` for Redis, ...) that is
 * not installed, as an error naming the package and the fix; undefined for any other error.
 * One of tokengate's own optional dependencies (the server's: Fastify, pino, yaml, ...) is
 * missing only when they were all left out (`npm install --omit=optional`): the fix names
 * them all at once, so that an operator does not discover them one by one.
 */
export function missingPackageError(error: unknown): Error | undefined {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown }
  if (code !== 'ERR_MODULE_NOT_FOUND' || typeof message !== 'string') return undefined
  const name = /Cannot find package '([^']+)'/.exec(message)?.[1]
  if (name === undefined) return undefined
  const optional = optionalDependencies()
  if (!Object.hasOwn(optional, name)) {
    return new Error(
      `this feature needs the package '${name}', which is not installed: npm install ${name}`,
      { cause: error },
    )
  }
  const all = Object.entries(optional).map(([dependency, version]) => `${dependency}@${version}`)
  return new Error(
    `this feature needs tokengate's optional dependencies, which are not installed ('${name}' is missing; npm install --omit=optional leaves them out): install tokengate without --omit=optional, or npm install ${all.join(' ')}`,
    { cause: error },
  )
}

/** tokengate's optional dependencies and their pinned versions, from its package.json. */
function optionalDependencies(): Record<string, string> {
  const text = readFileSync(new URL('../package.json', import.meta.url), 'utf8')
  return (
    (JSON.parse(text) as { optionalDependencies?: Record<string, string> }).optionalDependencies ??
    {}
  )
}
