import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyBaseLogger } from 'fastify'
import { PROBLEM_CONTENT_TYPE, problem } from '../http/problem.ts'

/**
 * Fastify's `clientErrorHandler`: requests Node's parser refused before Fastify saw them
 * (bad syntax, oversized head, timeout) get a problem+json answer with `no-store`, like every
 * other error. Why not Fastify's default: it logs the error at `trace` with `rawPacket`,
 * the bytes received — `Authorization` header included. Only the parser's error code is
 * logged here.
 */
export function createClientErrorHandler(log: FastifyBaseLogger) {
  return (error: NodeJS.ErrnoException, socket: Socket) => {
    if (error.code === 'ECONNRESET' || socket.destroyed) return
    const [status, code, detail] =
      error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? ([408, 'request_timeout', 'The request was not received in time.'] as const)
        : error.code === 'HPE_HEADER_OVERFLOW'
          ? ([
              431,
              'headers_too_large',
              'The request head is larger than this server accepts.',
            ] as const)
          : ([400, 'validation_failed', 'The request is not valid HTTP/1.1.'] as const)
    log.debug({ code: error.code, status }, 'client error')
    if (socket.writable) {
      const body = JSON.stringify(problem(status, code, detail, ''))
      socket.write(
        `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: ${PROBLEM_CONTENT_TYPE}\r\n` +
          `Cache-Control: no-store\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
          `Connection: close\r\n\r\n${body}`,
      )
    }
    socket.destroy()
  }
}
