import type { FastifyReply, FastifyRequest } from 'fastify'
import { problemResponse, sendProblemResponse } from '../../../http/problem-response.ts'

export function notFound(request: FastifyRequest, reply: FastifyReply, what: string) {
  return sendProblemResponse(
    reply,
    problemResponse('not_found', `No such ${what}.`, String(request.id)),
  )
}
