//! Request path normalisation, done once before routing so that every
//! spelling of a path reaches the same route, the same limit and the same
//! upstream path: `/webhooks//github`, `/webhooks/./github`,
//! `/webhooks/x/../github` and `/webhooks/%67ithub` are all
//! `/webhooks/github`.
//!
//! * percent-encoded unreserved characters (RFC 3986 §2.3: letters, digits,
//!   `-`, `_`, `~`) are decoded; other escapes are kept, hex in upper case;
//! * an encoded `/` (`%2F`) or `.` (`%2E`) is refused: decoding it would
//!   change the path's segments (or hide a dot-segment), and forwarding it
//!   encoded would let the upstream decode a path the limits never saw;
//! * empty segments (`//`) collapse;
//! * dot-segments are removed (RFC 3986 §5.2.4); `..` above the root stays
//!   at the root, as in nginx.
//!
//! A malformed escape (`%zz`, `%4`) is refused too, and so are spellings
//! that other servers read as a way up or as a separator: a dot-segment
//! with parameters (`..;`, `.;x`: Tomcat and Spring strip the parameters
//! and read `..`) and a backslash, plain or escaped (`\`, `%5C`: IIS and
//! some frameworks read `/`). Refusals are `400`.

use std::borrow::Cow;

/// Why a path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathError {
    /// `%2F` or `%2E` inside a segment.
    #[error("the path contains an encoded '/' or '.'")]
    EncodedSeparator,
    /// A `%` not followed by two hex digits.
    #[error("the path contains a malformed percent-escape")]
    BadEscape,
    /// The path does not start with `/`.
    #[error("the path must start with '/'")]
    NotAbsolute,
    /// A `\` or `%5C`, which some servers read as `/`.
    #[error("the path contains a '\\' (read as '/' by some servers)")]
    Backslash,
    /// A `.` or `..` segment with parameters (`..;x`), which some servers
    /// read as the dot-segment itself.
    #[error("the path contains a dot-segment with parameters (read as '..' by some servers)")]
    DotSegmentParameters,
}

/// The normalised form of `path` (borrowed when it is already normal).
pub(crate) fn normalize(path: &str) -> Result<Cow<'_, str>, PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if is_plain(path.as_bytes()) {
        return Ok(Cow::Borrowed(path));
    }
    check_ambiguous(path)?;
    if is_normal(path) {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode_unreserved(path)?;
    Ok(Cow::Owned(remove_dot_segments(&decoded)))
}

/// Refuses what other servers would read differently from us: a
/// backslash and a dot-segment with parameters (see the module docs).
fn check_ambiguous(path: &str) -> Result<(), PathError> {
    let b = path.as_bytes();
    if b.contains(&b'\\') {
        return Err(PathError::Backslash);
    }
    if b.contains(&b';') {
        let dotted = path
            .split('/')
            .filter_map(|seg| seg.split_once(';'))
            .any(|(head, _)| head == "." || head == "..");
        if dotted {
            return Err(PathError::DotSegmentParameters);
        }
    }
    Ok(())
}

/// Fastest check, one pass over the bytes: nothing that any of the
/// checks below looks at (`\`, `;`, `%`, `.`) and no empty segment but a
/// trailing one. Most paths are plain; one that is not takes the long way.
fn is_plain(path: &[u8]) -> bool {
    let mut prev = 0;
    for &b in path {
        if matches!(b, b'\\' | b';' | b'%' | b'.') || (b == b'/' && prev == b'/') {
            return false;
        }
        prev = b;
    }
    true
}

/// Fast check: no escape, no empty segment, no dot-segment.
fn is_normal(path: &str) -> bool {
    let b = path.as_bytes();
    if b.contains(&b'%') {
        return false;
    }
    // Every segment after a '/': not empty (except a trailing one), not `.`/`..`.
    let mut segments = path[1..].split('/').peekable();
    while let Some(seg) = segments.next() {
        let last = segments.peek().is_none();
        if (seg.is_empty() && !last) || seg == "." || seg == ".." {
            return false;
        }
    }
    true
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~')
}

fn decode_unreserved(path: &str) -> Result<String, PathError> {
    let b = path.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            // `path` is a &str and we only split at ASCII bytes.
            let next = b[i..].iter().position(|&c| c == b'%').map_or(b.len(), |p| i + p);
            out.push_str(&path[i..next]);
            i = next;
            continue;
        }
        let (Some(hi), Some(lo)) = (
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) else {
            return Err(PathError::BadEscape);
        };
        let byte = hi * 16 + lo;
        if byte == b'/' || byte == b'.' {
            return Err(PathError::EncodedSeparator);
        }
        if byte == b'\\' {
            return Err(PathError::Backslash);
        }
        if is_unreserved(byte) {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(hi)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(lo)]));
        }
        i += 3;
    }
    Ok(out)
}

/// RFC 3986 §5.2.4 on an absolute path, with empty segments collapsed.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let mut segments = path[1..].split('/').peekable();
    let mut trailing_slash = false;
    while let Some(seg) = segments.next() {
        let last = segments.peek().is_none();
        match seg {
            "" => trailing_slash = last,
            "." => trailing_slash = last,
            ".." => {
                out.pop();
                trailing_slash = last;
            }
            s => {
                out.push(s);
                trailing_slash = false;
            }
        }
    }
    let mut result = String::with_capacity(path.len());
    for s in &out {
        result.push('/');
        result.push_str(s);
    }
    if trailing_slash || result.is_empty() {
        result.push('/');
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(p: &str) -> Result<String, PathError> {
        normalize(p).map(Cow::into_owned)
    }

    #[test]
    fn spellings_of_one_path_normalise_alike() {
        for p in [
            "/webhooks/github",
            "/webhooks//github",
            "/webhooks/./github",
            "/webhooks/x/../github",
            "/webhooks/%67ithub",
            "/webhooks/%67%69thub",
            "//webhooks/github",
            "/./webhooks/github",
            "/../webhooks/github",
        ] {
            assert_eq!(n(p).as_deref(), Ok("/webhooks/github"), "{p}");
        }
    }

    #[test]
    fn trailing_slashes_and_root() {
        assert_eq!(n("/").as_deref(), Ok("/"));
        assert_eq!(n("/a/").as_deref(), Ok("/a/"));
        assert_eq!(n("/a/.").as_deref(), Ok("/a/"));
        assert_eq!(n("/a/..").as_deref(), Ok("/"));
        assert_eq!(n("/..").as_deref(), Ok("/"));
        assert_eq!(n("/a//").as_deref(), Ok("/a/"));
        assert_eq!(n("/api/../internal/x").as_deref(), Ok("/internal/x"));
    }

    #[test]
    fn escapes() {
        assert_eq!(n("/a%20b").as_deref(), Ok("/a%20b"));
        assert_eq!(n("/a%c3%a9").as_deref(), Ok("/a%C3%A9"));
        assert_eq!(n("/a%2fb"), Err(PathError::EncodedSeparator));
        assert_eq!(n("/a%2Fb"), Err(PathError::EncodedSeparator));
        assert_eq!(n("/%2e%2e/x"), Err(PathError::EncodedSeparator));
        assert_eq!(n("/a%2"), Err(PathError::BadEscape));
        assert_eq!(n("/a%zz"), Err(PathError::BadEscape));
        assert_eq!(n("a/b"), Err(PathError::NotAbsolute));
    }

    #[test]
    fn spellings_other_servers_read_as_a_way_up_are_refused() {
        for p in ["/api/..;/internal", "/api/..;x=1/internal", "/api/.;/x", "/..;"] {
            assert_eq!(n(p), Err(PathError::DotSegmentParameters), "{p}");
        }
        for p in ["/api/..\\internal", "/api\\x", "/api/%5Cx", "/api/%5c..%5cx"] {
            assert_eq!(n(p), Err(PathError::Backslash), "{p}");
        }
        // A `;` elsewhere is an ordinary character.
        assert_eq!(n("/a;b/..x;y/c").as_deref(), Ok("/a;b/..x;y/c"));
        assert_eq!(n("/a/b;/../c").as_deref(), Ok("/a/c"));
    }

    #[test]
    fn normal_paths_are_borrowed() {
        assert!(matches!(normalize("/a/b/c"), Ok(Cow::Borrowed(_))));
        assert!(matches!(normalize("/a/b/"), Ok(Cow::Borrowed(_))));
        assert!(matches!(normalize("/a..b/.c"), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn plain_paths_are_what_the_long_way_leaves_alone() {
        for p in ["/", "/a", "/a/b/", "/webhooks/github", "/a-b_c~d/E9"] {
            assert!(is_plain(p.as_bytes()), "{p}");
            assert!(check_ambiguous(p).is_ok() && is_normal(p), "{p}");
        }
        for p in [
            "//", "/a//b", "/a/./b", "/a/../b", "/a%41", "/a;b", "/a\\b", "/a.txt",
        ] {
            assert!(!is_plain(p.as_bytes()), "{p}");
        }
    }

    proptest::proptest! {
        /// A plain path is one the checks after it would let through
        /// unchanged.
        #[test]
        fn plain_implies_normal(p in "/[a-z/.;%\\\\]{0,12}") {
            if is_plain(p.as_bytes()) {
                proptest::prop_assert!(check_ambiguous(&p).is_ok());
                proptest::prop_assert!(is_normal(&p));
            }
        }

        /// Random respellings of a path (extra slashes, `./`, `x/../`,
        /// escaped unreserved letters) normalise to the same path.
        #[test]
        fn respellings_agree(
            segs in proptest::collection::vec("[a-z0-9_~-]{1,6}", 1..5),
            noise in proptest::collection::vec(0u8..4, 1..5),
        ) {
            let canonical = format!("/{}", segs.join("/"));
            let mut spelled = String::new();
            for (i, s) in segs.iter().enumerate() {
                match noise[i % noise.len()] {
                    0 => spelled.push_str("//"),
                    1 => spelled.push_str("/./"),
                    2 => spelled.push_str("/zz/../"),
                    _ => spelled.push('/'),
                }
                let mut chars = s.chars();
                if let (3, Some(c)) = (noise[i % noise.len()], chars.next()) {
                    spelled.push_str(&format!("%{:02X}", c as u32));
                    spelled.push_str(chars.as_str());
                } else {
                    spelled.push_str(s);
                }
            }
            proptest::prop_assert_eq!(n(&spelled), Ok(canonical));
        }
    }
}
