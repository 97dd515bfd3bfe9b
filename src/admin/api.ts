import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { addIssuer, removeIssuer } from '../auth/issuer-actions.ts'
import { OperationError } from '../auth/operation-error.ts'
import {
  issuePatFor,
  type PatStatus,
  patStatus,
  revokeLeakedPat,
  revokePatById,
  rotatePatById,
} from '../auth/pat-actions.ts'
import { createTenant, setTenantEnabled } from '../auth/tenant-actions.ts'
import type { IssuerConfig } from '../core/issuer.ts'
import type { AuditSearch, PatSearch } from '../stores/admin-store.ts'
import type { AuditEvent } from '../stores/store.ts'
import { adminOpenApiDocument } from './openapi.ts'
import type { Operator } from './operators.ts'
import { type AdminContext, operatorContext, sendProblem } from './server.ts'
import { readStatus } from './status.ts'
import { auditCsv, auditView, issuerView, patView } from './views.ts'

export const API_PREFIX = '/admin/api/v1'
const BEARER = /^Bearer ([A-Za-z0-9\-._~+/]+=*)$/
const CHALLENGE = 'Bearer realm="tokengate-admin"'
const DAY_MS = 86_400_000
const EXPORT_MAX = 10_000

type Query = Record<string, string | undefined>

/**
 * The admin API: bearer operator credentials only (no cookies, so no CSRF surface), JSON
 * in and out, problem+json failures with the API's codes. Writes need the operator role.
 */
export function registerAdminApi(app: FastifyInstance, ctx: AdminContext): void {
  const { store, clock } = ctx

  async function authenticate(request: FastifyRequest, reply: FastifyReply) {
    const header = request.headers.authorization
    if (header === undefined) {
      return sendProblem(
        reply,
        401,
        'missing_authorization',
        'An operator credential is required.',
        request,
        { 'www-authenticate': CHALLENGE },
      )
    }
    const match = BEARER.exec(header)
    if (!match) {
      return sendProblem(
        reply,
        401,
        'malformed_authorization',
        'Expected: Bearer <admin token or operator JWT>.',
        request,
        { 'www-authenticate': `${CHALLENGE}, error="invalid_request"` },
      )
    }
    const checked = await ctx.operators.verify(match[1] as string)
    if (!checked.ok) {
      if (checked.reason === 'no_role') {
        return sendProblem(
          reply,
          403,
          'insufficient_permission',
          'The operator JWT carries no admin role.',
          request,
          { 'www-authenticate': `${CHALLENGE}, error="insufficient_scope"` },
        )
      }
      return sendProblem(
        reply,
        401,
        'invalid_token',
        'The operator credential is not valid.',
        request,
        { 'www-authenticate': `${CHALLENGE}, error="invalid_token"` },
      )
    }
    request.operator = checked.operator
  }

  const operatorOf = (request: FastifyRequest) => request.operator as Operator
  const write = async (request: FastifyRequest, reply: FastifyReply) => {
    if (operatorOf(request).role !== 'operator') {
      return sendProblem(
        reply,
        403,
        'insufficient_permission',
        'This action needs the operator role; this credential is read-only.',
        request,
        { 'www-authenticate': `${CHALLENGE}, error="insufficient_scope"` },
      )
    }
  }
  const op = (request: FastifyRequest) => operatorContext(request, operatorOf(request), clock)
  const body = (request: FastifyRequest) => {
    const value = request.body
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw new OperationError('invalid', 'expected a JSON object body')
    }
    return value as Record<string, unknown>
  }

  app.register(
    async (api) => {
      api.addHook('onRequest', authenticate)
      api.get('/me', async (request) => {
        const o = operatorOf(request)
        return { actor: o.actor, role: o.role, expiresAt: new Date(o.expiresAt).toISOString() }
      })
      api.get('/openapi.json', async () => adminOpenApiDocument())

      api.get('/tenants', async () => ({
        tenants: (await store.listTenants()).map((t) => ({
          ...t,
          createdAt: new Date(t.createdAt).toISOString(),
        })),
      }))
      api.post('/tenants', { preHandler: write }, async (request, reply) => {
        const b = body(request)
        const tenant = await createTenant(
          store,
          { id: text(b.id, 'id'), name: optionalText(b.name, 'name') },
          op(request),
        )
        return reply
          .code(201)
          .send({ ...tenant, createdAt: new Date(tenant.createdAt).toISOString() })
      })
      for (const [verb, enabled] of [
        ['enable', true],
        ['disable', false],
      ] as const) {
        api.post<{ Params: { id: string } }>(
          `/tenants/:id/${verb}`,
          { preHandler: write },
          async (request) => {
            const { tenant, changed } = await setTenantEnabled(
              store,
              request.params.id,
              enabled,
              op(request),
            )
            return { ...tenant, createdAt: new Date(tenant.createdAt).toISOString(), changed }
          },
        )
      }

      api.get<{ Querystring: Query }>('/pats', async (request) => {
        const now = clock.now()
        const { search, status, page } = patQuery(request.query, now)
        const result = await store.admin.searchPats(search, page)
        const items = result.items.filter(
          (p) => status === undefined || patStatus(p, now) === status,
        )
        return { tokens: items.map((p) => patView(p, now)), nextCursor: result.nextCursor }
      })
      api.post('/pats', { preHandler: write }, async (request, reply) => {
        const b = body(request)
        const o = op(request)
        const { token, record } = await issuePatFor(
          store,
          {
            tenantId: text(b.tenantId, 'tenantId'),
            subject: text(b.subject, 'subject'),
            name: optionalText(b.name, 'name'),
            permissions: stringList(b.permissions, 'permissions'),
            expiresAt: expiryFrom(b.expiresInDays, o.now, ctx.config),
          },
          o,
        )
        return reply.code(201).send({ token, ...patView(record, o.now) })
      })
      api.post<{ Params: { id: string } }>(
        '/pats/:id/revoke',
        { preHandler: write },
        async (request) => {
          const o = op(request)
          const { record, changed } = await revokePatById(store, request.params.id, o)
          return { ...patView(record, o.now), changed }
        },
      )
      api.post<{ Params: { id: string } }>(
        '/pats/:id/rotate',
        { preHandler: write },
        async (request, reply) => {
          const b = request.body == null ? {} : body(request)
          const o = op(request)
          const graceSeconds = b.graceSeconds ?? 0
          if (typeof graceSeconds !== 'number' || !Number.isInteger(graceSeconds)) {
            throw new OperationError('invalid', 'graceSeconds: expected an integer')
          }
          const rotated = await rotatePatById(
            store,
            request.params.id,
            {
              graceMs: graceSeconds * 1000,
              expiresAt: expiryFrom(b.expiresInDays, o.now, ctx.config),
            },
            o,
          )
          return reply.code(201).send({
            token: rotated.token,
            ...patView(rotated.record, o.now),
            oldTokenGraceUntil: new Date(rotated.graceUntil).toISOString(),
          })
        },
      )
      api.post('/pats/revoke-leaked', { preHandler: write }, async (request) => {
        const o = op(request)
        const result = await revokeLeakedPat(store, text(body(request).token, 'token'), o)
        return {
          fingerprint: result.fingerprint,
          outcome: result.outcome,
          tokenId: result.record?.id ?? null,
          tenantId: result.record?.tenantId ?? null,
        }
      })

      api.get('/issuers', async () => {
        const health = new Map(ctx.issuers.keyStatus().map((s) => [s.issuer, s]))
        return {
          issuers: (await store.listIssuers()).map((i) => issuerView(i, health.get(i.issuer))),
        }
      })
      api.post('/issuers', { preHandler: write }, async (request, reply) => {
        const issuer = body(request) as unknown as IssuerConfig
        if (
          typeof issuer.issuer !== 'string' ||
          !Array.isArray(issuer.audiences) ||
          typeof issuer.keySource !== 'object' ||
          issuer.keySource === null
        ) {
          throw new OperationError('invalid', 'expected { issuer, audiences, keySource, ... }')
        }
        const { replaced } = await addIssuer(store, issuer, op(request))
        return reply.code(replaced ? 200 : 201).send({ issuer: issuer.issuer, replaced })
      })
      api.delete<{ Params: { issuer: string } }>(
        '/issuers/:issuer',
        { preHandler: write },
        async (request, reply) => {
          await removeIssuer(store, request.params.issuer, op(request))
          return reply.code(204).send()
        },
      )

      api.get<{ Querystring: Query }>('/audit-events', async (request, reply) => {
        const { search, page } = auditQuery(request.query)
        const format = request.query.format
        if (format === 'csv' || format === 'json') {
          const events = await exportAudit(ctx, search)
          const name = `tokengate-audit.${format}`
          reply.header('content-disposition', `attachment; filename="${name}"`)
          if (format === 'csv') return reply.type('text/csv; charset=utf-8').send(auditCsv(events))
          return { events: events.map(auditView) }
        }
        if (format !== undefined) throw new OperationError('invalid', 'format: csv or json')
        const result = await store.admin.searchAudit(search, page)
        return { events: result.items.map(auditView), nextCursor: result.nextCursor }
      })
      api.get('/status', async () => readStatus(ctx))
    },
    { prefix: API_PREFIX },
  )
}

/** Every event matching `search`, newest first, up to 10,000 (the export bound). */
export async function exportAudit(ctx: AdminContext, search: AuditSearch): Promise<AuditEvent[]> {
  const events: AuditEvent[] = []
  let cursor: string | undefined
  do {
    const page = await ctx.store.admin.searchAudit(search, { limit: 500, cursor })
    events.push(...page.items)
    cursor = page.nextCursor ?? undefined
  } while (cursor !== undefined && events.length < EXPORT_MAX)
  return events.slice(0, EXPORT_MAX)
}

const PAT_STATUSES: readonly PatStatus[] = ['active', 'grace', 'rotated', 'expired', 'revoked']

/** PAT search from query parameters (shared by the API and the console). */
export function patQuery(query: Query, now: number) {
  const within = query.expiringWithinDays
  const days = within ? Number(within) : undefined
  if (days !== undefined && !(Number.isInteger(days) && days > 0 && days <= 3650)) {
    throw new OperationError('invalid', 'expiringWithinDays: a whole number of days, 1-3650')
  }
  const status = query.status || undefined
  if (status !== undefined && !PAT_STATUSES.includes(status as PatStatus)) {
    throw new OperationError('invalid', `status: one of ${PAT_STATUSES.join(', ')}`)
  }
  const search: PatSearch = {
    tenantId: query.tenant || undefined,
    subject: query.subject || undefined,
    name: query.name || undefined,
    last4: query.last4 || undefined,
    expiringBefore: days === undefined ? undefined : now + days * DAY_MS,
  }
  return { search, status: status as PatStatus | undefined, page: pageOf(query) }
}

/** Audit search from query parameters; `since`/`until` are ISO 8601 times. */
export function auditQuery(query: Query) {
  const timeOf = (name: 'since' | 'until') => {
    const value = query[name]
    if (!value) return undefined
    const ms = Date.parse(value)
    if (Number.isNaN(ms)) throw new OperationError('invalid', `${name}: expected an ISO 8601 time`)
    return ms
  }
  const search: AuditSearch = {
    tenantId: query.tenant || undefined,
    type: query.type || undefined,
    actor: query.actor || undefined,
    since: timeOf('since'),
    until: timeOf('until'),
  }
  return { search, page: pageOf(query) }
}

function pageOf(query: Query) {
  const limit = query.limit === undefined ? 50 : Number(query.limit)
  if (!(Number.isInteger(limit) && limit >= 1 && limit <= 200)) {
    throw new OperationError('invalid', 'limit: an integer from 1 to 200')
  }
  return { limit, cursor: query.cursor || undefined }
}

/** `expiresInDays`: a positive number of days, `null` for never, absent for the default. */
export function expiryFrom(
  value: unknown,
  now: number,
  config: AdminContext['config'],
): number | null {
  const maxDays = config.pat.maxExpiresInDays
  if (value === undefined || value === '') return now + config.pat.defaultExpiresInDays * DAY_MS
  if (value === null || value === 'never') {
    if (maxDays > 0) throw new OperationError('invalid', `expiry: at most ${maxDays} days`)
    return null
  }
  const days = typeof value === 'number' ? value : Number(value)
  if (!(Number.isInteger(days) && days > 0) || (maxDays > 0 && days > maxDays)) {
    throw new OperationError('invalid', 'expiresInDays: a whole number of days within policy')
  }
  return now + days * DAY_MS
}

function text(value: unknown, name: string): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new OperationError('invalid', `${name}: required string`)
  }
  return value
}

function optionalText(value: unknown, name: string): string | undefined {
  return value === undefined || value === null ? undefined : text(value, name)
}

function stringList(value: unknown, name: string): string[] {
  if (value === undefined || value === null) return []
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) {
    throw new OperationError('invalid', `${name}: expected an array of strings`)
  }
  return value
}
