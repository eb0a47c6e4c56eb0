//! The chunked transfer coding of an upstream's response body (RFC 9112
//! §7.1), decoded as it arrives.
//!
//! Strict where leniency would let two parties read one body differently:
//! every line ends in CRLF (a bare LF is refused), a chunk's data is
//! followed by exactly CRLF, a size is 1 to 16 hex digits. Chunk extensions
//! and trailer fields are read and dropped. What follows the last chunk's
//! trailer section stays in the buffer: on a kept-alive connection it would
//! be the next response's, so the caller can tell an upstream that sent
//! more than it answered.

use bytes::{Buf, Bytes, BytesMut};

/// The longest chunk-size line, extensions included.
const MAX_SIZE_LINE: usize = 4 * 1024;
/// The most bytes of trailer fields.
const MAX_TRAILERS: usize = 16 * 1024;

/// A body in the chunked coding, part way through.
#[derive(Debug, Default)]
pub(crate) struct Chunked {
    state: State,
    trailer_bytes: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before a chunk-size line.
    #[default]
    Size,
    /// In a chunk's data, this many bytes still to come.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last chunk: trailer lines up to the empty one.
    Trailers,
    /// The body is whole.
    Done,
}

/// What the buffered bytes gave.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Body data.
    Data(Bytes),
    /// Nothing more without more bytes.
    More,
    /// The body is whole.
    Done,
}

/// A body that is not valid in the chunked coding.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid chunked response body: {0}")]
pub(crate) struct ChunkedError(&'static str);

impl Chunked {
    /// Decodes from the front of `buf` what it can: the next piece of data
    /// (taken from `buf`), [`Step::More`] when `buf` holds no more of the
    /// body, or [`Step::Done`] once the last chunk and its trailers are
    /// read (then `buf` holds only what came after the body).
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, ChunkedError> {
        loop {
            match self.state {
                State::Size => {
                    let Some(len) = line(buf, MAX_SIZE_LINE)? else {
                        return Ok(Step::More);
                    };
                    let size = chunk_size(&buf[..len])?;
                    buf.advance(len + 2);
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = usize::try_from(left).map_or(buf.len(), |left| left.min(buf.len()));
                    let data = buf.split_to(n).freeze();
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                    return Ok(Step::Data(data));
                }
                State::DataEnd => match buf.get(..2) {
                    Some(b"\r\n") => {
                        buf.advance(2);
                        self.state = State::Size;
                    }
                    Some(_) => return Err(ChunkedError("chunk data not followed by CRLF")),
                    None if buf.first().is_some_and(|b| *b != b'\r') => {
                        return Err(ChunkedError("chunk data not followed by CRLF"));
                    }
                    None => return Ok(Step::More),
                },
                State::Trailers => {
                    let Some(len) = line(buf, MAX_TRAILERS.saturating_sub(self.trailer_bytes))? else {
                        return Ok(Step::More);
                    };
                    buf.advance(len + 2);
                    if len == 0 {
                        self.state = State::Done;
                    } else {
                        self.trailer_bytes += len + 2;
                    }
                }
                State::Done => return Ok(Step::Done),
            }
        }
    }
}

/// The length of the CRLF-ended line at the front of `buf` (CRLF not
/// counted), `None` while its end has not arrived; a line longer than
/// `max` or ended by a bare LF is an error.
fn line(buf: &[u8], max: usize) -> Result<Option<usize>, ChunkedError> {
    let window = &buf[..buf.len().min(max.saturating_add(2))];
    match window.iter().position(|b| *b == b'\n') {
        Some(0) => Err(ChunkedError("line ended by a bare LF")),
        Some(lf) if window[lf - 1] != b'\r' => Err(ChunkedError("line ended by a bare LF")),
        Some(lf) if window[..lf - 1].contains(&b'\r') => Err(ChunkedError("CR inside a line")),
        Some(lf) => Ok(Some(lf - 1)),
        None if buf.len() > max.saturating_add(1) => Err(ChunkedError("line too long")),
        None => Ok(None),
    }
}

/// A chunk-size line's size: hex digits, then nothing, or whitespace and
/// extensions (`;…`), which are dropped.
fn chunk_size(line: &[u8]) -> Result<u64, ChunkedError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(ChunkedError("chunk size is not hex"));
    }
    if digits > 16 {
        return Err(ChunkedError("chunk size too large"));
    }
    let rest = &line[digits..];
    let rest = &rest[rest.iter().take_while(|b| matches!(b, b' ' | b'\t')).count()..];
    if !rest.is_empty() && rest[0] != b';' {
        return Err(ChunkedError(
            "chunk size followed by something else than an extension",
        ));
    }
    let size = line[..digits].iter().fold(0u64, |size, b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => b - b'A' + 10,
        };
        size << 4 | u64::from(digit)
    });
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Feeds `input` in pieces of the given sizes; the body's data, whether
    /// it ended, and what was left after it.
    fn run(input: &[u8], pieces: &[usize]) -> Result<(Vec<u8>, bool, Vec<u8>), ChunkedError> {
        let mut chunked = Chunked::default();
        let mut buf = BytesMut::new();
        let mut data = Vec::new();
        let mut fed = 0;
        let mut pieces = pieces.iter().copied().chain(std::iter::repeat(usize::MAX));
        loop {
            match chunked.decode(&mut buf)? {
                Step::Data(d) => {
                    assert!(!d.is_empty(), "no empty data is given");
                    data.extend_from_slice(&d);
                }
                Step::Done => return Ok((data, true, buf.to_vec())),
                Step::More if fed == input.len() => return Ok((data, false, buf.to_vec())),
                Step::More => {
                    let n = pieces.next().unwrap_or(1).max(1).min(input.len() - fed);
                    buf.extend_from_slice(&input[fed..fed + n]);
                    fed += n;
                }
            }
        }
    }

    #[test]
    fn a_body_with_extensions_and_trailers_decodes_and_leaves_what_follows() {
        let input = b"5;name=value\r\nhello\r\nA \t;x\r\n, world!!!\r\n0\r\nExpires: never\r\n\r\nHTTP/1.1";
        let (data, done, rest) = run(input, &[]).expect("valid");
        assert_eq!(data, b"hello, world!!!");
        assert!(done);
        assert_eq!(rest, b"HTTP/1.1");
    }

    #[test]
    fn a_body_cut_short_is_not_done() {
        let (data, done, _) = run(b"5\r\nhel", &[]).expect("valid so far");
        assert_eq!(data, b"hel");
        assert!(!done);
        let (_, done, _) = run(b"5\r\nhello\r\n0\r\n", &[1]).expect("valid so far");
        assert!(!done, "the trailer section's empty line has not come");
    }

    #[test]
    fn malformed_bodies_are_refused() {
        let cases: [(&[u8], &str); 8] = [
            (b"zz\r\n", "chunk size is not hex"),
            (b"5\nhello\r\n", "line ended by a bare LF"),
            (b"\n", "line ended by a bare LF"),
            (b"5\r\nhelloX\r\n", "chunk data not followed by CRLF"),
            (b"5\r\nhello\rX", "chunk data not followed by CRLF"),
            (b"1ffffffffffffffff\r\n", "chunk size too large"),
            (
                b"5 x\r\nhello\r\n",
                "chunk size followed by something else than an extension",
            ),
            (b"5;a\rb\r\n", "CR inside a line"),
        ];
        for (input, why) in cases {
            for piece in [1, 3, usize::MAX] {
                assert_eq!(
                    run(input, &[piece; 64]).map(|_| ()),
                    Err(ChunkedError(why)),
                    "{:?} in pieces of {piece}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    #[test]
    fn a_line_or_trailers_too_long_are_refused() {
        let mut long = vec![b'1'];
        long.extend(std::iter::repeat_n(b' ', MAX_SIZE_LINE + 8));
        assert_eq!(run(&long, &[]).map(|_| ()), Err(ChunkedError("line too long")));
        let mut trailers = b"0\r\n".to_vec();
        for _ in 0..(MAX_TRAILERS / 10) + 1 {
            trailers.extend_from_slice(b"X-T: 1234\r\n");
        }
        trailers.extend_from_slice(b"\r\n");
        assert_eq!(
            run(&trailers, &[]).map(|_| ()),
            Err(ChunkedError("line too long"))
        );
    }

    proptest! {
        /// Any body, cut into any chunks (with or without extensions and
        /// trailers), fed in any pieces, decodes to itself and leaves what
        /// follows it untouched.
        #[test]
        fn any_chunking_fed_in_any_pieces_decodes_to_the_body(
            body in proptest::collection::vec(any::<u8>(), 0..600),
            cuts in proptest::collection::vec(1usize..80, 1..20),
            pieces in proptest::collection::vec(1usize..40, 0..60),
            extensions in any::<bool>(),
            upper in any::<bool>(),
            trailers in proptest::collection::vec("[A-Za-z-]{1,10}: [ -~]{0,20}", 0..3),
            after in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let mut input = Vec::new();
            let mut rest = &body[..];
            let mut cut = cuts.iter().cycle();
            while !rest.is_empty() {
                let n = (*cut.next().unwrap_or(&1)).min(rest.len());
                let size = if upper { format!("{n:X}") } else { format!("{n:x}") };
                input.extend_from_slice(size.as_bytes());
                if extensions {
                    input.extend_from_slice(b" ;ext=\"v\"");
                }
                input.extend_from_slice(b"\r\n");
                input.extend_from_slice(&rest[..n]);
                input.extend_from_slice(b"\r\n");
                rest = &rest[n..];
            }
            input.extend_from_slice(b"0\r\n");
            for t in &trailers {
                input.extend_from_slice(t.as_bytes());
                input.extend_from_slice(b"\r\n");
            }
            input.extend_from_slice(b"\r\n");
            input.extend_from_slice(&after);
            let (data, done, left) = run(&input, &pieces).expect("valid");
            prop_assert_eq!(data, body);
            prop_assert!(done);
            // What arrived with the body's last piece stays; later bytes were
            // never fed.
            prop_assert!(after.starts_with(&left));
        }
    }
}
