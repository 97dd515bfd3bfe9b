/**
 * An optional package a feature needs (`pg` for Postgres, `ioredis` for Redis, ...) that is
 * not installed, as an error naming the package and the fix; undefined for any other error.
 */
export function missingPackageError(error: unknown): Error | undefined {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown }
  if (code !== 'ERR_MODULE_NOT_FOUND' || typeof message !== 'string') return undefined
  const name = /Cannot find package '([^']+)'/.exec(message)?.[1]
  if (name === undefined) return undefined
  return new Error(
    `this feature needs the package '${name}', which is not installed: npm install ${name}`,
    { cause: error },
  )
}
