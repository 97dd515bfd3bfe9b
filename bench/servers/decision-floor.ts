/**
 * The floor of a decision listener written in Node.js (issue #36): no gate, no store, every
 * ask answered with the bytes tokengate's allow carries for the bench PAT (status, the
 * RateLimit pair, the identity headers, a fresh `X-Request-Id`, `X-Accel-Expires`). What
 * `bench/hop-cpu.ts --floors` puts behind nginx in place of tokengate, to show what any
 * Node.js listener can reach on the decision hop:
 *
 * - `--kind http`: node:http (`writeHead` with a flat list, as src/decision/server.ts answers);
 * - `--kind net`: a bare `net` server that answers each request head it reads with fixed
 *   bytes (no HTTP parser, no request or response objects): below anything that parses HTTP.
 *
 * Prints `READY <port>` (a TCP port answering 200, for the harness) once the socket listens.
 * Usage: node bench/servers/decision-floor.ts <fixturesDir> <port> <upstream>
 *   --decision-socket=<path> --kind http|net
 */
import { rmSync } from 'node:fs'
import { createServer } from 'node:http'
import { createServer as createNetServer } from 'node:net'
import { parseArgs } from 'node:util'

const { values } = parseArgs({
  allowPositionals: true,
  options: { 'decision-socket': { type: 'string' }, kind: { type: 'string', default: 'http' } },
})
const socket = values['decision-socket']
if (!socket) throw new Error('--decision-socket=<path> is required')

// tokengate's allow for the bench PAT, as its decision listener wrote it (Node adds Date,
// Connection and Keep-Alive; the net floor writes them itself).
const FIELDS: [string, string][] = [
  ['ratelimit-policy', '"per-token";q=1000000000;w=60'],
  ['ratelimit', '"per-token";r=999999999;t=60'],
  ['x-auth-tenant', 'bench-tenant'],
  ['x-auth-subject', 'bench-bot'],
  ['x-auth-token-type', 'pat'],
  ['x-auth-token-id', 'tok_JnC7Sm6MukmmbwYtoM5X'],
  ['x-auth-permissions', 'tokens:read'],
]
const expires = () => `@${Math.floor(Date.now() / 1000)}`
let served = 0
const requestId = () => `LDPuyQmJJWE-${++served}`

const server =
  values.kind === 'net'
    ? createNetServer((connection) => {
        const fixed = FIELDS.map(([name, value]) => `${name}: ${value}\r\n`).join('')
        let pending = ''
        connection.setEncoding('latin1')
        connection.on('error', () => {})
        connection.on('data', (chunk: string) => {
          pending += chunk
          let answers = ''
          for (let end = pending.indexOf('\r\n\r\n'); end !== -1; ) {
            pending = pending.slice(end + 4)
            answers += `HTTP/1.1 200 OK\r\n${fixed}x-request-id: ${requestId()}\r\ncontent-length: 0\r\nx-accel-expires: ${expires()}\r\nDate: ${new Date().toUTCString()}\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n`
            end = pending.indexOf('\r\n\r\n')
          }
          if (answers !== '') connection.write(answers, 'latin1')
        })
      })
    : createServer((_request, response) => {
        const head: string[] = []
        for (const [name, value] of FIELDS) head.push(name, value)
        head.push('x-request-id', requestId(), 'content-length', '0', 'x-accel-expires', expires())
        response.writeHead(200, head)
        response.end()
      })

rmSync(socket, { force: true })
server.listen(socket, () => {
  const health = createServer((_request, response) => response.end('ok'))
  health.listen(0, '127.0.0.1', () => {
    console.log(`READY ${(health.address() as { port: number }).port}`)
  })
})
process.on('SIGTERM', () => process.exit(0))
