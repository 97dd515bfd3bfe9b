/**
 * A decision listener that decides nothing (issue #36): every request is answered 200 with the
 * bytes tokengate's allow carries for the bench PAT (the RateLimit pair, the identity, a fresh
 * `X-Request-Id`, `X-Accel-Expires`), so nginx `auth_request` in front of it costs what any
 * listener costs before it does any work. Two kinds:
 * - `http`: node:http made and answering as src/decision/server.ts does (`optimizeEmptyRequests`,
 *   `writeHead` with a flat list);
 * - `net`: a bare `net` server that finds each request head's end and writes fixed bytes (no
 *   HTTP parser, no request or response objects): below anything that parses HTTP.
 * A floor to measure against, not a listener to ship. bench/hop-ceiling.ts and the hops case of
 * bench/run.ts (bench/hop-rows.ts) put it behind the shipped nginx example.
 *
 * Usage: node bench/servers/decision-floor.ts http|net <port | unix:path>
 * (port 0: any; prints `READY <port>`, or `READY unix:<path>` once the socket listens)
 */
import { rmSync } from 'node:fs'
import { createServer } from 'node:http'
import { createServer as createNetServer, type Server } from 'node:net'
import { IDENTITY, RATE_LIMIT } from './undici-proxy.ts'

export const FLOOR_KINDS = ['http', 'net'] as const
export type FloorKind = (typeof FLOOR_KINDS)[number]

/** The allow's fields before the request id, in the order tokengate writes them. */
const FIELDS = Object.entries({ ...RATE_LIMIT, ...IDENTITY })
let served = 0
// As long as tokengate's (an 11-character random part and a counter).
const requestId = () => `LDPuyQmJJWE-${++served}`
// tokengate's `@<epoch second>` on an allow nginx may keep (src/decision/cache-expiry.ts).
const accelExpires = () => `@${Math.floor(Date.now() / 1000)}`

/** A server of `kind`, not yet listening. */
export function createDecisionFloor(kind: FloorKind): Server {
  if (kind === 'http') {
    const fixed = FIELDS.flat()
    // As tokengate's listener is made: no stream life cycle for a bodyless request (a floor
    // without it read below tokengate's own listener).
    return createServer({ optimizeEmptyRequests: true }, (request, response) => {
      request.resume()
      response.writeHead(200, [
        ...fixed,
        'x-request-id',
        requestId(),
        'content-length',
        '0',
        'x-accel-expires',
        accelExpires(),
      ])
      response.end()
    })
  }
  const head = `HTTP/1.1 200 OK\r\n${FIELDS.map(([name, value]) => `${name}: ${value}\r\n`).join('')}`
  return createNetServer({ noDelay: true }, (connection) => {
    let pending = ''
    connection.setEncoding('latin1')
    connection.on('error', () => {})
    connection.on('data', (chunk: string) => {
      pending += chunk
      let answers = ''
      for (let end = pending.indexOf('\r\n\r\n'); end !== -1; end = pending.indexOf('\r\n\r\n')) {
        pending = pending.slice(end + 4)
        // Date, Connection and Keep-Alive as node:http adds them to tokengate's answer.
        answers += `${head}x-request-id: ${requestId()}\r\ncontent-length: 0\r\nx-accel-expires: ${accelExpires()}\r\nDate: ${new Date().toUTCString()}\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n`
      }
      if (answers !== '') connection.write(answers, 'latin1')
    })
  })
}

if (import.meta.main) {
  const [kind, where = ''] = process.argv.slice(2)
  if (!FLOOR_KINDS.includes(kind as FloorKind) || where === '') {
    console.error('Usage: node bench/servers/decision-floor.ts http|net <port | unix:path>')
    process.exit(2)
  }
  const server = createDecisionFloor(kind as FloorKind)
  if (where.startsWith('unix:')) {
    const path = where.slice('unix:'.length)
    rmSync(path, { force: true })
    server.listen(path, () => console.log(`READY ${where}`))
    process.on('exit', () => rmSync(path, { force: true }))
  } else {
    server.listen(Number(where), '127.0.0.1', () => {
      console.log(`READY ${(server.address() as { port: number }).port}`)
    })
  }
  process.on('SIGTERM', () => process.exit(0))
}
