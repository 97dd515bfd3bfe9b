/**
 * The OpenAPI 3.1 document of the admin API, served at `/admin/api/v1/openapi.json` and
 * printed by `tokengate admin openapi`. Written out by hand: the admin API is small, and
 * test/admin/admin-api.test.ts checks that every route here exists and answers.
 */
const problemResponse = (description: string) => ({
  description,
  content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
})
const json = (description: string, schema: object = { type: 'object' }) => ({
  description,
  content: { 'application/json': { schema } },
})
const failures = {
  '400': problemResponse('Invalid request (validation_failed).'),
  '401': problemResponse('No or invalid operator credential.'),
  '403': problemResponse('The operator role is needed (insufficient_permission).'),
  '503': problemResponse('The store is not reachable.'),
}
const writeOp = (summary: string, ok: Record<string, unknown>, requestBody?: object) => ({
  summary,
  ...(requestBody
    ? { requestBody: { required: true, content: { 'application/json': { schema: requestBody } } } }
    : {}),
  responses: { ...ok, ...failures, '404': problemResponse('Not found.') },
})
const query = (name: string, description: string) => ({
  name,
  in: 'query',
  required: false,
  schema: { type: 'string' },
  description,
})
const idParam = (name: string) => ({ name, in: 'path', required: true, schema: { type: 'string' } })
const page = [
  query('limit', 'Page size, 1-200 (default 50).'),
  query('cursor', 'nextCursor of the previous page.'),
]

export function adminOpenApiDocument() {
  return {
    openapi: '3.1.0',
    info: {
      title: 'tokengate admin API',
      version: '1',
      description:
        'Operator API on the admin listener. Authenticate with `Authorization: Bearer <admin token (tga_...) or operator JWT>`. Writes need the `operator` role and are audited with the operator as actor.',
    },
    servers: [{ url: '/admin/api/v1' }],
    security: [{ operator: [] }],
    paths: {
      '/me': {
        get: {
          summary: 'The calling operator',
          responses: { '200': json('Actor, role, expiry.'), ...failures },
        },
      },
      '/tenants': {
        get: { summary: 'List tenants', responses: { '200': json('Tenants.'), ...failures } },
        post: writeOp(
          'Create a tenant',
          { '201': json('Created.'), '409': problemResponse('Exists.') },
          {
            type: 'object',
            required: ['id'],
            properties: { id: { type: 'string' }, name: { type: 'string' } },
          },
        ),
      },
      '/tenants/{id}/enable': {
        post: {
          ...writeOp('Enable a tenant', { '200': json('Tenant.') }),
          parameters: [idParam('id')],
        },
      },
      '/tenants/{id}/disable': {
        post: {
          ...writeOp('Disable a tenant', { '200': json('Tenant.') }),
          parameters: [idParam('id')],
        },
      },
      '/pats': {
        get: {
          summary: 'Search PATs across tenants',
          parameters: [
            query('tenant', 'Exact tenant id.'),
            query('subject', 'Subject contains.'),
            query('name', 'Name contains.'),
            query('last4', 'Last 4 characters of the token.'),
            query('status', 'active, grace, rotated, expired or revoked (filters the page).'),
            query('expiringWithinDays', 'Unrevoked tokens expiring within N days.'),
            ...page,
          ],
          responses: { '200': json('Tokens (metadata only) and nextCursor.'), ...failures },
        },
        post: writeOp(
          'Issue a PAT; the token is in this response only',
          {
            '201': json('The token and its metadata.'),
            '409': problemResponse('Tenant disabled.'),
          },
          {
            type: 'object',
            required: ['tenantId', 'subject'],
            properties: {
              tenantId: { type: 'string' },
              subject: { type: 'string' },
              name: { type: 'string' },
              permissions: { type: 'array', items: { type: 'string' } },
              expiresInDays: {
                type: ['integer', 'null'],
                description: 'null: never (if policy allows).',
              },
            },
          },
        ),
      },
      '/pats/{id}/revoke': {
        post: {
          ...writeOp('Revoke a PAT', { '200': json('Token.') }),
          parameters: [idParam('id')],
        },
      },
      '/pats/{id}/rotate': {
        post: {
          ...writeOp(
            'Rotate a PAT; the new token is in this response only',
            { '201': json('New token.'), '409': problemResponse('Revoked or rotated.') },
            {
              type: 'object',
              properties: {
                graceSeconds: { type: 'integer' },
                expiresInDays: { type: ['integer', 'null'] },
              },
            },
          ),
          parameters: [idParam('id')],
        },
      },
      '/pats/revoke-leaked': {
        post: writeOp(
          'Revoke a PAT given in plaintext (leak)',
          { '200': json('Fingerprint and outcome.') },
          {
            type: 'object',
            required: ['token'],
            properties: { token: { type: 'string' } },
          },
        ),
      },
      '/issuers': {
        get: {
          summary: 'Trusted issuers with key-source health',
          responses: { '200': json('Issuers.'), ...failures },
        },
        post: writeOp(
          'Add or replace a trusted issuer',
          { '200': json('Replaced.'), '201': json('Added.') },
          {
            type: 'object',
            required: ['issuer', 'audiences', 'keySource'],
          },
        ),
      },
      '/issuers/{issuer}': {
        delete: {
          ...writeOp('Remove a trusted issuer (URL-encoded iss)', {
            '204': { description: 'Removed.' },
          }),
          parameters: [idParam('issuer')],
        },
      },
      '/audit-events': {
        get: {
          summary: 'Audit events across tenants, newest first',
          parameters: [
            query('tenant', 'Tenant id.'),
            query('type', 'Event type, e.g. pat.revoked.'),
            query('actor', 'Actor, e.g. admin:alice.'),
            query('since', 'ISO 8601, inclusive.'),
            query('until', 'ISO 8601, exclusive.'),
            query('format', 'csv or json: export up to 10,000 events as a download.'),
            ...page,
          ],
          responses: { '200': json('Events and nextCursor, or the export.'), ...failures },
        },
      },
      '/status': {
        get: {
          summary: 'Readiness, key sources, change feed, request rates',
          responses: { '200': json('Status.'), ...failures },
        },
      },
      '/openapi.json': {
        get: { summary: 'This document', responses: { '200': json('OpenAPI 3.1.') } },
      },
    },
    components: {
      securitySchemes: { operator: { type: 'http', scheme: 'bearer' } },
      schemas: {
        Problem: {
          type: 'object',
          required: ['type', 'title', 'status', 'detail', 'code', 'requestId'],
          properties: {
            type: { type: 'string' },
            title: { type: 'string' },
            status: { type: 'integer' },
            detail: { type: 'string' },
            code: { type: 'string' },
            requestId: { type: 'string' },
          },
        },
      },
    },
  }
}
