//! A minimal RESP client over `std::net`, enough to ask a test server
//! `PING` or `CLUSTER INFO` without a Redis client library (the testkit has
//! no dependencies, so every crate's tests can use it).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long one connect, write or read may take.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Sends one command to `127.0.0.1:port` and returns its reply as text: a
/// simple string, an integer or a bulk string (`""` for a nil). An error
/// reply is an `io::Error` carrying its message; arrays are not supported.
pub(crate) fn command(port: u16, args: &[&str]) -> io::Result<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    (&stream).write_all(request.as_bytes())?;
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    match kind {
        "+" | ":" => Ok(rest.to_owned()),
        "-" => Err(io::Error::other(rest.to_owned())),
        "$" => {
            let len: i64 = rest
                .parse()
                .map_err(|_| io::Error::other(format!("bad bulk length {rest:?}")))?;
            let Ok(len) = usize::try_from(len) else {
                return Ok(String::new());
            };
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body)?;
            body.truncate(len);
            Ok(String::from_utf8_lossy(&body).into_owned())
        }
        _ => Err(io::Error::other(format!("unexpected reply {line:?}"))),
    }
}

/// Whether the server on `port` answers `PING` with `PONG`.
pub(crate) fn pings(port: u16) -> bool {
    command(port, &["PING"]).is_ok_and(|r| r == "PONG")
}
