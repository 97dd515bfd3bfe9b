import { Buffer } from 'node:buffer'
import type { Readable } from 'node:stream'

/** Whether a `Content-Type` names an `application/x-www-form-urlencoded` body (RFC 6750 §2.2). */
export function isFormContentType(contentType: string | undefined): boolean {
  return (
    contentType?.trimStart().toLowerCase().startsWith('application/x-www-form-urlencoded') === true
  )
}

/** The whole body of a stream the caller then replaces, or undefined once it exceeds `limit`. */
export async function readBounded(payload: Readable, limit: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of payload) {
    size += (chunk as Buffer).length
    if (size > limit) return undefined
    chunks.push(chunk as Buffer)
  }
  return Buffer.concat(chunks)
}

/**
 * Reads a request's body (at most `limit` bytes) and puts the bytes back (`unshift`) before
 * the stream ends, so the application's own body parser later reads the same body, unchanged.
 * Why not consume it: Express, Hono on Node and plain `node:http` handlers read the request
 * stream itself after the binding; a consumed stream would reach them empty. Undefined when
 * the body is larger than `limit` (the bytes read are put back as well).
 */
export function peekBody(
  stream: Readable,
  limit: number,
  contentLength: number | undefined,
): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const finish = (whole: boolean) => {
      stream.off('readable', onReadable)
      stream.off('error', reject)
      const body = Buffer.concat(chunks)
      if (body.length > 0) stream.unshift(body)
      resolve(whole ? body : undefined)
    }
    const onReadable = () => {
      for (let chunk = stream.read(); chunk !== null; chunk = stream.read()) {
        chunks.push(chunk as Buffer)
        size += (chunk as Buffer).length
        if (size > limit) return finish(false)
      }
      // The whole body: as long as it said, or the end of a chunked one (put back before the
      // 'end' event, which is only emitted once the buffer is empty).
      const ended = (stream as { _readableState?: { ended?: boolean } })._readableState?.ended
      if (size === contentLength || ended === true) finish(true)
    }
    stream.on('error', reject)
    stream.on('readable', onReadable)
  })
}
