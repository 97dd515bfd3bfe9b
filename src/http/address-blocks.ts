import { BlockList, isIPv4, isIPv6 } from 'node:net'

/** Whether an address is in a configured list (addresses or CIDR blocks). */
export type AddressMatcher = (address: string | undefined) => boolean

/** One parsed address or CIDR block. */
export interface AddressBlock {
  readonly address: string
  readonly type: 'ipv4' | 'ipv6'
  readonly prefix: number | undefined
}

/** An address or CIDR block (`10.0.0.0/8`, `::1`), or undefined when it is neither. */
export function parseAddressBlock(entry: string): AddressBlock | undefined {
  const [address = '', bits, extra] = entry.split('/')
  const type = isIPv4(address) ? 'ipv4' : isIPv6(address) ? 'ipv6' : undefined
  if (!type || extra !== undefined) return undefined
  if (bits === undefined) return { address, type, prefix: undefined }
  const prefix = /^\d{1,3}$/.test(bits) ? Number(bits) : Number.NaN
  return prefix <= (type === 'ipv4' ? 32 : 128) ? { address, type, prefix } : undefined
}

/** Why an entry is not an address or a CIDR block, or undefined when it is one. */
export function addressBlockProblem(entry: string): string | undefined {
  return parseAddressBlock(entry) ? undefined : `not an address or CIDR block: "${entry}"`
}

/**
 * A matcher of addresses against a list of addresses and CIDR blocks (validated when the
 * configuration is loaded; a bad entry here is a bug and throws). An IPv4-mapped IPv6 peer
 * (a dual-stack listener's view of an IPv4 client) matches its IPv4 entries.
 */
export function createAddressMatcher(entries: readonly string[]): AddressMatcher {
  const blocks = new BlockList()
  for (const entry of entries) {
    const block = parseAddressBlock(entry)
    if (!block) throw new Error(addressBlockProblem(entry))
    if (block.prefix === undefined) blocks.addAddress(block.address, block.type)
    else blocks.addSubnet(block.address, block.prefix, block.type)
  }
  return (address) => {
    if (!address) return false
    const plain =
      address.startsWith('::ffff:') && isIPv4(address.slice(7)) ? address.slice(7) : address
    return blocks.check(plain, isIPv4(plain) ? 'ipv4' : 'ipv6')
  }
}
