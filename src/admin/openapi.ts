import { ADMIN_TOKEN_NAME, MAX_ADMIN_TOKEN_LIFETIME_DAYS } from '../auth/admin-tokens.ts'

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
  '400': problemResponse('Invalid request (validation_failed), naming the field and the value.'),
  '415': problemResponse('Not application/json (unsupported_media_type).'),
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
const rateLimitSchema = {
  type: ['object', 'null'],
  description: "The key's or tenant's own request rate, replacing the default; null: the default.",
  required: ['max', 'windowSec'],
  properties: {
    max: { type: 'integer', minimum: 1 },
    windowSec: { type: 'integer', minimum: 1, maximum: 86_400 },
  },
}
const quotaSchema = {
  type: ['object', 'null'],
  description:
    'A quota of uses (429 quota_exhausted once spent), refilled daily or monthly (UTC) or every intervalSec; null: none.',
  required: ['limit'],
  properties: {
    limit: { type: 'integer', minimum: 1 },
    refill: {
      enum: ['none', 'daily', 'monthly', 'interval'],
      description: "Left out: none for a new key; an edit keeps the key's refill.",
    },
    intervalSec: { type: 'integer', minimum: 60, description: 'With refill interval only.' },
  },
}
const keyFields = {
  rateLimit: rateLimitSchema,
  quota: quotaSchema,
  metadata: {
    type: ['object', 'null'],
    description: 'Your own JSON object, at most 4096 bytes.',
  },
  externalId: { type: ['string', 'null'], maxLength: 255, description: 'Your own id; searchable.' },
  certificateThumbprint: {
    type: ['string', 'null'],
    pattern: '^[A-Za-z0-9_-]{43}$',
    description:
      'Binds the key to one client certificate (RFC 8705): the x5t#S256, base64url SHA-256 of its DER. The key is refused (401 invalid_token) without that certificate; null unbinds.',
  },
}
const usageParams = [
  query('resolution', 'minute (default: the last hour), hour (the last 48 h) or day (30 days).'),
  query('since', 'ISO 8601, inclusive (aligned to the bucket).'),
  query('until', 'ISO 8601, exclusive.'),
]
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
      '/tenants/{id}': {
        get: {
          summary: 'One tenant',
          parameters: [idParam('id')],
          responses: { '200': json('Tenant.'), ...failures, '404': problemResponse('Not found.') },
        },
        patch: {
          ...writeOp(
            "Change a tenant's name or its own rate limit (audited before/after)",
            { '200': json('Tenant and changed.') },
            {
              type: 'object',
              additionalProperties: false,
              properties: { name: { type: 'string' }, rateLimit: rateLimitSchema },
            },
          ),
          parameters: [idParam('id')],
        },
      },
      '/tenants/{id}/top-keys': {
        get: {
          summary: "A tenant's busiest keys in a time range",
          parameters: [idParam('id'), ...usageParams, query('limit', '1-100 (default 10).')],
          responses: { '200': json('Keys with counts by outcome.'), ...failures },
        },
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
            query('externalId', 'Exactly this external id.'),
            query(
              'status',
              'active, grace, rotated, expired, disabled or revoked (filters the page).',
            ),
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
              ...keyFields,
            },
            additionalProperties: false,
          },
        ),
      },
      '/pats/{id}': {
        get: {
          summary: 'One PAT (metadata only) with what is left of its quota',
          parameters: [idParam('id')],
          responses: {
            '200': json('Token and quotaUsage.'),
            ...failures,
            '404': problemResponse('Not found.'),
          },
        },
        patch: {
          ...writeOp(
            'Edit a PAT: only the fields given change, null clears one (audited before/after; every instance within a second)',
            {
              '200': json('Token and changed.'),
              '409': problemResponse('Revoked.'),
            },
            {
              type: 'object',
              additionalProperties: false,
              properties: {
                name: { type: 'string' },
                permissions: { type: 'array', items: { type: 'string' } },
                expiresAt: {
                  type: ['string', 'null'],
                  description:
                    'ISO 8601, or "never"; within pat.maxExpiresInDays counted from the creation.',
                },
                ...keyFields,
                resetQuotaUsage: { type: 'boolean', description: 'Start the quota count again.' },
              },
            },
          ),
          parameters: [idParam('id')],
        },
      },
      '/pats/{id}/disable': {
        post: {
          ...writeOp('Disable a PAT without revoking it (401 until enabled)', {
            '200': json('Token.'),
          }),
          parameters: [idParam('id')],
        },
      },
      '/pats/{id}/enable': {
        post: {
          ...writeOp('Enable a disabled PAT', { '200': json('Token.') }),
          parameters: [idParam('id')],
        },
      },
      '/usage': {
        get: {
          summary: 'Requests by outcome (allowed, 401, 403, 429) of a key, a tenant or all',
          parameters: [
            query('scope', 'key, tenant or all (default).'),
            query('id', 'The key (tok_...) or tenant id; not with scope all.'),
            ...usageParams,
            query('format', 'csv: one row per bucket, as a download.'),
          ],
          responses: { '200': json('Series with totals, or CSV.'), ...failures },
        },
      },
      '/admin-tokens': {
        get: {
          summary: 'Admin tokens (metadata only)',
          responses: { '200': json('Tokens.'), ...failures },
        },
        post: writeOp(
          'Issue an admin token; the token is in this response only',
          { '201': json('The token and its metadata.') },
          {
            type: 'object',
            required: ['name', 'role'],
            additionalProperties: false,
            properties: {
              name: { type: 'string', pattern: ADMIN_TOKEN_NAME.source },
              role: { enum: ['read-only', 'operator'] },
              expiresInDays: {
                type: 'integer',
                minimum: 1,
                maximum: MAX_ADMIN_TOKEN_LIFETIME_DAYS,
                default: 30,
              },
            },
          },
        ),
      },
      '/admin-tokens/{id}/revoke': {
        post: {
          ...writeOp('Revoke an admin token (its sessions end)', { '200': json('Token.') }),
          parameters: [idParam('id')],
        },
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
      '/jwt-revocations': {
        get: {
          summary: 'JWT revocation rules in force',
          responses: {
            '200': json('Rules: id, issuer, kind, value, issuedBefore, expiresAt.'),
            ...failures,
          },
        },
        post: writeOp(
          "Refuse an issuer's JWTs by jti, sid, sub or tenant (sub and tenant: issued before issuedBefore, default now)",
          {
            '201': json(
              'The rule (an existing rule for the same issuer, kind and value is widened).',
            ),
          },
          {
            type: 'object',
            required: ['issuer', 'kind', 'value'],
            properties: {
              issuer: { type: 'string' },
              kind: { type: 'string', enum: ['jti', 'sid', 'sub', 'tenant'] },
              value: { type: 'string' },
              issuedBefore: { type: 'string', format: 'date-time' },
              reason: { type: 'string' },
            },
          },
        ),
      },
      '/jwt-revocations/{id}': {
        delete: {
          ...writeOp('Remove a JWT revocation rule before it expires', {
            '204': { description: 'Removed.' },
          }),
          parameters: [idParam('id')],
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
