//! The base-name hash both sides compute: the tracepoint tier's filter for unlinks and renames.

/// Bytes at the end of a file's base name that [`name_hash`] covers: the kernel hashes an
/// unlinked path's tail in one bounded backward pass, up to its last `/`.
pub const NAME_HASH_TAIL: usize = 32;

/// FNV-1a over the last [`NAME_HASH_TAIL`] bytes of a file's base name (up to the first NUL),
/// last byte first. The kernel side computes the same hash; the tracepoint tier filters
/// unlinks and renames with it.
pub const fn name_hash(name: &[u8]) -> u64 {
    let mut len = 0;
    while len < name.len() && name[len] != 0 {
        len += 1;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < len && i < NAME_HASH_TAIL {
        h ^= name[len - 1 - i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_hash_stops_at_nul_and_covers_the_tail() {
        assert_eq!(name_hash(b"a.sock"), name_hash(b"a.sock\0junk"));
        assert_ne!(name_hash(b"a.sock"), name_hash(b"b.sock"));
        let mut long = [b'x'; 200];
        long[0] = b'y';
        assert_eq!(name_hash(&long), name_hash(&long[200 - NAME_HASH_TAIL..]));
        // Last byte first: FNV-1a of "kcos.a".
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in b"kcos.a" {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        assert_eq!(name_hash(b"a.sock"), h);
    }
}
