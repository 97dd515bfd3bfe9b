/**
 * A store with some of its methods replaced (the SQLite writer thread's writes, sealed issuer
 * secrets, write health). Every other property is the store's own, read at each access so
 * that getters such as `changesReadAsOf` stay live, and its methods are bound to it once, not
 * at every access: the request path reads the store through several of these layers.
 */
export function withOverrides<T extends object>(
  store: T,
  overrides: { readonly [K in keyof T]?: unknown },
): T {
  const bound = new Map<PropertyKey, { readonly of: unknown; readonly method: unknown }>()
  return new Proxy(store, {
    get(target, property) {
      if (Object.hasOwn(overrides, property)) return overrides[property as keyof T]
      const value: unknown = Reflect.get(target, property, target)
      if (typeof value !== 'function') return value
      const known = bound.get(property)
      if (known !== undefined && known.of === value) return known.method
      const method = value.bind(target)
      bound.set(property, { of: value, method })
      return method
    },
  })
}
