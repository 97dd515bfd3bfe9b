import { API_PREFIX } from '../http/api-path.ts'
import type { V1Route } from './routes/route.ts'
import { Problem } from './routes/v1/schemas.ts'

const PROBLEM_REF = { $ref: '#/components/schemas/Problem' }

function problemResponse(description: string) {
  return { description, content: { 'application/problem+json': { schema: PROBLEM_REF } } }
}

/** One document per route table: it is built once, and the table never changes. */
const documents = new WeakMap<readonly V1Route[], Record<string, unknown>>()

/**
 * The OpenAPI 3.1 document, generated from the route table (the same schemas Fastify
 * validates with). Both security schemes are declared; a JWT caller must also send the
 * `X-Tenant-Id` header, described as a parameter on every operation.
 */
export function openApiDocument(routes: readonly V1Route[]): Record<string, unknown> {
  const cached = documents.get(routes)
  if (cached) return cached
  const paths: Record<string, Record<string, unknown>> = {}
  for (const route of routes) {
    const path = `${API_PREFIX}${route.path.replace(/:(\w+)/g, '{$1}')}`
    const parameters: unknown[] = [
      {
        name: 'X-Tenant-Id',
        in: 'header',
        required: false,
        description:
          'Required with a JWT access token (must equal its tenant). Optional with a PAT; when sent it must equal the PAT tenant.',
        schema: { type: 'string' },
      },
      ...schemaParameters(route.schema.params, 'path'),
      ...schemaParameters(route.schema.querystring, 'query'),
    ]
    const responses: Record<string, unknown> = {}
    for (const [status, schema] of Object.entries(route.schema.response)) {
      responses[status] = {
        description: 'OK',
        content: { 'application/json': { schema } },
      }
    }
    responses['400'] = problemResponse('Invalid request parameters')
    responses['401'] = problemResponse(
      'Missing or malformed Authorization, invalid or expired token, or X-Tenant-Id missing/incorrect for a JWT',
    )
    responses['403'] = problemResponse('Authenticated, but a required permission is not held')
    if (route.path.includes(':')) responses['404'] = problemResponse('Not found')
    responses['429'] = problemResponse('Rate limited')
    responses['503'] = problemResponse('A dependency (store, key source) is unavailable')

    paths[path] ??= {}
    ;(paths[path] as Record<string, unknown>)[route.method.toLowerCase()] = {
      operationId: route.operationId,
      summary: route.summary,
      ...(route.description ? { description: route.description } : {}),
      ...(route.permissions.length > 0 ? { 'x-required-permissions': [...route.permissions] } : {}),
      security: [
        { bearerJwt: [...route.permissions] },
        { personalAccessToken: [...route.permissions] },
      ],
      parameters,
      responses,
    }
  }
  const document = {
    openapi: '3.1.0',
    info: {
      title: 'tokengate',
      version: '1',
      description:
        'Token-authenticated, multi-tenant API. Every request carries `Authorization: Bearer <token>`: a JWT access token (with `X-Tenant-Id`) or a Personal Access Token (`pat_...`).',
    },
    servers: [{ url: '/' }],
    paths,
    components: {
      schemas: { Problem: stripId(Problem) },
      securitySchemes: {
        bearerJwt: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description: 'JWT access token from a trusted issuer; requires the X-Tenant-Id header.',
        },
        personalAccessToken: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'pat_<38 base62 characters>',
          description: 'Personal Access Token issued by an operator; X-Tenant-Id not required.',
        },
      },
    },
  }
  documents.set(routes, document)
  return document
}

function schemaParameters(schema: object | undefined, location: 'path' | 'query'): unknown[] {
  if (!schema) return []
  const s = schema as { properties?: Record<string, object>; required?: string[] }
  return Object.entries(s.properties ?? {}).map(([name, property]) => ({
    name,
    in: location,
    required: location === 'path' || (s.required ?? []).includes(name),
    schema: property,
  }))
}

function stripId(schema: object): object {
  const { $id: _id, ...rest } = schema as { $id?: string }
  return rest
}
