import type { FastifyReply } from 'fastify'
import type { FailureResponse } from '../http/failure-response.ts'

/** The one way a Fastify reply sends a non-2xx answer built in src/http/. */
export function sendResponse(reply: FastifyReply, response: FailureResponse): FastifyReply {
  return reply.code(response.status).headers(response.headers).send(response.body)
}
