/**
 * A minimum pace for request bodies streamed to the upstream: a body that stops for
 * `idleMs`, or that after the first `idleMs` averages below `minBytesPerSec`, is cut.
 *
 * Why: a proxied upload holds an upstream connection for as long as it lasts, so a
 * slowloris body (one byte every few seconds) is a cheap way to hold connections. This is
 * nginx's `client_body_timeout` (the gap between two reads) plus Apache mod_reqtimeout's
 * `MinRate` (a minimum average rate after a grace period).
 */
import { Transform, type TransformCallback } from 'node:stream'

export interface UploadPaceOptions {
  readonly idleMs: number
  /** 0: no minimum rate, only the idle gap. */
  readonly minBytesPerSec: number
}

/** The error a cut body fails with (`code` is `UPLOAD_TOO_SLOW`). */
export class UploadTooSlowError extends Error {
  override readonly name = 'UploadTooSlowError'
  readonly code = 'UPLOAD_TOO_SLOW'
}

/**
 * Passes `source` through, cutting it when it is too slow: the returned stream then fails
 * with `UploadTooSlowError`, and `source` is paused (not destroyed: the caller's connection
 * must stay open for the answer).
 */
export function paceUpload(
  source: NodeJS.ReadableStream & { unpipe(destination: Transform): unknown },
  options: UploadPaceOptions,
): Transform {
  const startedAt = Date.now()
  let lastDataAt = startedAt
  let bytes = 0
  // Time the upstream was not taking data: the caller is not to blame for it.
  let blockedMs = 0
  let lastTick = startedAt

  const through = new Transform({
    transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback) {
      bytes += chunk.length
      lastDataAt = Date.now()
      callback(null, chunk)
    },
  })
  const tick = Math.max(50, Math.min(options.idleMs, 1_000))
  const timer = setInterval(() => {
    const now = Date.now()
    if (through.readableLength > 0 || through.writableLength > 0) {
      blockedMs += now - lastTick
      lastDataAt = now
    }
    lastTick = now
    const elapsed = now - startedAt - blockedMs
    const tooSlow =
      now - lastDataAt >= options.idleMs ||
      (options.minBytesPerSec > 0 &&
        elapsed >= options.idleMs &&
        bytes < (options.minBytesPerSec * elapsed) / 1_000)
    if (!tooSlow) return
    clearInterval(timer)
    source.unpipe(through)
    source.pause()
    through.destroy(new UploadTooSlowError('the request body arrived too slowly'))
  }, tick)
  timer.unref()
  const stop = () => clearInterval(timer)
  through.once('end', stop)
  through.once('close', stop)
  source.once('error', (error: Error) => through.destroy(error))
  source.pipe(through)
  return through
}
