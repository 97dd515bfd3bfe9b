import type { FastifyReply, FastifyRequest } from 'fastify'
import { problem } from '../../../http/problem.ts'

export function notFound(request: FastifyRequest, reply: FastifyReply, what: string) {
  return reply
    .code(404)
    .type('application/problem+json')
    .send(problem(404, 'not_found', `No such ${what}.`, String(request.id)))
}
