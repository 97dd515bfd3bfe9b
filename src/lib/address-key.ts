import { isIP } from 'node:net'

/**
 * The key a client address is counted by (failed authentications, connections): an IPv4 address as it is, an IPv6
 * address by its /64 (the block one subscriber usually controls, so rotating addresses
 * within it buys nothing), an IPv4-mapped IPv6 address as its IPv4 address. Hand-written
 * (a dozen lines) so that the library path needs no Fastify plugin for it.
 */
export function addressKeyOf(address: string): string {
  if (!address.includes(':')) return address
  const zone = address.indexOf('%')
  const plain = (zone === -1 ? address : address.slice(0, zone)).toLowerCase()
  const mapped = /^(?:0{0,4}:){0,5}:?ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(plain)
  if (mapped && isIP(mapped[1] as string) === 4) return mapped[1] as string
  if (isIP(plain) !== 6) return plain
  const [head = '', tail] = plain.split('::')
  const left = head === '' ? [] : head.split(':')
  const right = tail === undefined || tail === '' ? [] : tail.split(':')
  // An embedded IPv4 tail (`::1.2.3.4`) stands for two groups, none of them in the /64.
  const groups = [...left, ...Array(8 - left.length - right.length).fill('0'), ...right]
  return `${groups
    .slice(0, 4)
    .map((group) => Number.parseInt(group, 16).toString(16))
    .join(':')}::/64`
}
