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
  const wrapped = new Proxy(store, {
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
  layers.set(wrapped, { store, overrides })
  return wrapped
}

/** Each wrapper's store and overrides, for `propertyReader`. */
const layers = new WeakMap<object, { readonly store: object; readonly overrides: object }>()

/** The names of `T`'s properties that are not methods (a method read off a wrapper is bound). */
type ValueKey<T> = {
  [K in keyof T]-?: T[K] extends ((...args: never[]) => unknown) | undefined ? never : K
}[keyof T]

/**
 * A function reading a getter or field as an access through the wrappers would, at each call,
 * without their traps per read: a getter read per request (`changesReadAsOf` in each
 * cacheable decision) paid ~0.1 µs per layer. It reads the property from the outermost layer
 * that overrides it, else from the store beneath every layer.
 */
export function propertyReader<T extends object, K extends ValueKey<T>>(
  store: T,
  property: K,
): () => T[K] {
  let at: object = store
  for (let layer = layers.get(at); layer !== undefined; layer = layers.get(at)) {
    if (Object.hasOwn(layer.overrides, property)) {
      const { overrides } = layer
      return () => (overrides as T)[property]
    }
    at = layer.store
  }
  const target = at as T
  return () => target[property]
}
