//! [`key_of`]: the mock's one hash of a cache key's parts (prompt-cache
//! prefixes, `prompt_cache_key`s), shared by the token counter and the
//! prompt cache.

/// 64-bit FNV-1a of `parts`, each followed by a 0xff separator (no valid
/// UTF-8 text contains that byte), so that `["ab","c"]` and `["a","bc"]`
/// differ. A fixed algorithm: keys do not change between runs.
pub(crate) fn key_of<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let step = |h: u64, b: u8| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    parts.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, part| {
        step(part.iter().fold(h, |h, b| step(h, *b)), 0xff)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_separate_parts() {
        assert_ne!(key_of([&b"ab"[..], b"c"]), key_of([&b"a"[..], b"bc"]));
        assert_eq!(key_of([&b"ab"[..], b"c"]), key_of([&b"ab"[..], b"c"]));
    }
}
