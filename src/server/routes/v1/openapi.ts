import type { V1Route } from '../route.ts'
import { object } from './schemas.ts'

export const openApiRoute: V1Route = {
  operationId: 'getOpenApiDocument',
  method: 'GET',
  path: '/openapi.json',
  summary: 'This OpenAPI 3.1 document',
  permissions: [],
  schema: { response: { 200: object({}, { additionalProperties: true }) } },
  handler: () => async () => {
    // Imported lazily: the document is built from the route table, which includes this route.
    const { openApiDocument } = await import('../../openapi.ts')
    return openApiDocument()
  },
}
