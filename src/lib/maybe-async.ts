/**
 * Values that are there now or arrive later. The request path answers synchronously when no
 * step has to wait (a cached PAT, a cached JWT, a static key); each `await` would cost a
 * microtask turn and a promise per request.
 */

/** A value now, or a promise of it. */
export type MaybePromise<T> = T | PromiseLike<T>

/** Whether a maybe-synchronous value is still pending. */
export function isPromiseLike<T>(value: MaybePromise<T>): value is PromiseLike<T> {
  return typeof (value as PromiseLike<T> | null)?.then === 'function'
}

/**
 * `next(value)` at once when the value is there, else once it settles: no promise hop on the
 * synchronous path. `onRejected` handles a rejected value only, never an error from `next`.
 *
 * @example
 * return thenMaybe(lookups.findTenant(id), tenantFailure, storeUnavailable)
 */
export function thenMaybe<T, R>(
  value: MaybePromise<T>,
  next: (value: T) => R | Promise<R>,
  onRejected?: (error: unknown) => R,
): R | Promise<R> {
  if (!isPromiseLike(value)) return next(value)
  return Promise.resolve(value).then(next, onRejected)
}

/**
 * A callback-style call as a maybe-synchronous value: the result itself when `start` calls
 * back before returning (an in-process counter), else a promise of it (a Redis round trip).
 * An error rejects (or throws, when synchronous).
 *
 * @example
 * const verdict = settle<Verdict>((done) => limiter.gate(key, digest, done))
 */
export function settle<T>(
  start: (done: (error: Error | null, value?: T) => void) => void,
): MaybePromise<T> {
  let sync = true
  let settled = false
  let value: T | undefined
  let failure: Error | null = null
  let resolve: ((value: T) => void) | undefined
  let reject: ((error: Error) => void) | undefined
  start((error, result) => {
    if (settled) return
    settled = true
    if (sync) {
      failure = error
      value = result
    } else if (error) reject?.(error)
    else resolve?.(result as T)
  })
  sync = false
  if (settled) {
    if (failure) throw failure
    return value as T
  }
  return new Promise<T>((res, rej) => {
    resolve = res
    reject = rej
  })
}
