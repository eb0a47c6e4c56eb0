//! The HTTP/1.1 bytes the in-place server (`server/h1.rs`) and the raw
//! upstream exchange (`proxy/exchange.rs`) both write and read: one header
//! line, and a decimal length as both accept it.

/// Writes one header line, `name: value\r\n`, into `out` (a request head
/// for an upstream, a response head for a client).
pub(crate) fn write_header_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A length written as ASCII digits only (no sign, no space, at most 19
/// digits, so it always fits a `u64`), as hyper accepts a
/// `Content-Length`; `None` for anything else.
pub(crate) fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_digits_only_and_never_wrap() {
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"1234"), Some(1234));
        assert_eq!(decimal(b"9999999999999999999"), Some(9_999_999_999_999_999_999));
        for bad in [
            &b""[..],
            b"+1",
            b"-1",
            b" 1",
            b"1 ",
            b"1a",
            b"0x1",
            b"10000000000000000000",
        ] {
            assert_eq!(decimal(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_header_line_ends_in_crlf() {
        let mut out = Vec::new();
        write_header_line(&mut out, b"content-length", b"3");
        assert_eq!(out, b"content-length: 3\r\n");
    }
}
