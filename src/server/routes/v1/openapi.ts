import { openApiDocument } from '../../openapi.ts'
import type { V1Route } from '../route.ts'
import { object } from './schemas.ts'

/** `GET /openapi.json`: the document of `routes()`, the table this route is part of. */
export function createOpenApiRoute(routes: () => readonly V1Route[]): V1Route {
  return {
    operationId: 'getOpenApiDocument',
    method: 'GET',
    path: '/openapi.json',
    summary: 'This OpenAPI 3.1 document',
    permissions: [],
    schema: { response: { 200: object({}, { additionalProperties: true }) } },
    handler: () => async () => openApiDocument(routes()),
  }
}
