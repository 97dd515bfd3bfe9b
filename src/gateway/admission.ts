/**
 * Admission to the upstream: how many requests each token and each tenant may have in flight
 * to the upstream, and a bounded wait for one of the pool's connections.
 *
 * Why: without it the upstream pool is first come, first served, and one tenant's slow
 * requests (uploads at one byte a second) hold every connection while everybody else queues
 * until the timeout. With per-tenant and per-token caps below the pool size, a tenant can
 * only ever hold its share, and a request that cannot get a connection soon is told so
 * (503) instead of queueing behind the hog. Framework-free: the proxy maps the outcome to HTTP.
 */

export interface AdmissionLimits {
  /** Requests in flight to the upstream at once: the pool's connection count. */
  readonly connections: number
  readonly perTenant: number
  readonly perToken: number
  /** Longest wait for a connection when all are taken. */
  readonly waitMs: number
}

export type Admission =
  | { readonly ok: true; release(): void }
  /** `token`/`tenant`: the caller is over its own cap; `busy`: no connection within waitMs. */
  | { readonly ok: false; readonly reason: 'token' | 'tenant' | 'busy' }

export interface UpstreamAdmission {
  /** Admits one request; the caller must `release()` an admission once its exchange is over. */
  admit(tenantId: string, tokenKey: string): Admission | Promise<Admission>
}

interface Waiter {
  readonly grant: () => void
  readonly timer: NodeJS.Timeout
}

/**
 * Queued requests count against their token's and tenant's caps like running ones, so a
 * tenant cannot fill the wait queue either. Waiters get connections in arrival order.
 */
export function createUpstreamAdmission(limits: AdmissionLimits): UpstreamAdmission {
  const perTenant = new Map<string, number>()
  const perToken = new Map<string, number>()
  const waiting: Waiter[] = []
  let running = 0

  const add = (map: Map<string, number>, key: string, delta: number) => {
    const next = (map.get(key) ?? 0) + delta
    if (next === 0) map.delete(key)
    else map.set(key, next)
  }

  const ticket = (tenantId: string, tokenKey: string): Admission => {
    let released = false
    return {
      ok: true,
      release() {
        if (released) return
        released = true
        add(perTenant, tenantId, -1)
        add(perToken, tokenKey, -1)
        const next = waiting.shift()
        // The connection passes straight to the next waiter; `running` is unchanged.
        if (next) next.grant()
        else running--
      },
    }
  }

  return {
    admit(tenantId, tokenKey) {
      if ((perToken.get(tokenKey) ?? 0) >= limits.perToken) return { ok: false, reason: 'token' }
      if ((perTenant.get(tenantId) ?? 0) >= limits.perTenant) return { ok: false, reason: 'tenant' }
      add(perTenant, tenantId, 1)
      add(perToken, tokenKey, 1)
      if (running < limits.connections) {
        running++
        return ticket(tenantId, tokenKey)
      }
      return new Promise<Admission>((resolve) => {
        const waiter: Waiter = {
          grant: () => {
            clearTimeout(waiter.timer)
            resolve(ticket(tenantId, tokenKey))
          },
          timer: setTimeout(() => {
            waiting.splice(waiting.indexOf(waiter), 1)
            add(perTenant, tenantId, -1)
            add(perToken, tokenKey, -1)
            resolve({ ok: false, reason: 'busy' })
          }, limits.waitMs),
        }
        waiting.push(waiter)
      })
    },
  }
}
