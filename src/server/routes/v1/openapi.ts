import Type from 'typebox'
import type { V1Route } from '../route.ts'

export const openApiRoute: V1Route = {
  operationId: 'getOpenApiDocument',
  method: 'GET',
  path: '/openapi.json',
  summary: 'This OpenAPI 3.1 document',
  permissions: [],
  schema: { response: { 200: Type.Object({}, { additionalProperties: true }) } },
  handler: () => async () => {
    // Imported lazily: the document is built from the route table, which includes this route.
    const { openApiDocument } = await import('../../openapi.ts')
    return openApiDocument()
  },
}
