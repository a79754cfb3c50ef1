//! The `connect` step: a fresh TCP connection to a resolved address of the branch.

use crate::failure::{FailureClass, Step};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpStream;

use super::ctx::{StepCtx, StepError, StepFailure};

/// A TCP connection the `connect` step opened, and the address it went to.
#[derive(Debug)]
pub struct Connected {
    pub stream: TcpStream,
    pub addr: SocketAddr,
}

/// The `connect` step: a fresh TCP connection to the first of `addresses` that accepts, on the
/// branch's port; the address goes into the attempt.
///
/// # Errors
/// As [`connect`], or the step's timeout.
pub async fn run(ctx: &mut StepCtx<'_>, addresses: &[IpAddr]) -> Result<Connected, StepFailure> {
    let port = ctx.probe.branch.port;
    let limit = ctx.steps.deadline.step(Step::Connect).limit;
    let (stream, addr) = ctx
        .steps
        .run(Step::Connect, connect(addresses, port, limit))
        .await?;
    ctx.learned.address = Some(addr.to_string());
    Ok(Connected { stream, addr })
}

/// Connect to the first address that accepts, trying them in answer order within `timeout`
/// (the whole step, not per address).
///
/// # Errors
/// A [`StepError`] classified by [`classify_io`] from the last address's error, or
/// [`FailureClass::TcpTimeout`] when the step deadline passes.
pub async fn connect(
    addresses: &[IpAddr],
    port: u16,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), StepError> {
    let attempt = async {
        let mut last = None;
        for ip in addresses {
            let addr = SocketAddr::new(*ip, port);
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok((s, addr));
                }
                Err(e) => last = Some((addr, e)),
            }
        }
        Err(match last {
            Some((addr, e)) => StepError {
                class: classify_io(&e),
                message: format!("connect to {addr}: {e}"),
            },
            None => StepError {
                class: FailureClass::DnsNodata,
                message: "no address to connect to".into(),
            },
        })
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(StepError {
            class: FailureClass::TcpTimeout,
            message: format!(
                "no TCP connection to {:?} port {port} within {} ms",
                addresses,
                timeout.as_millis()
            ),
        }),
    }
}

/// Map a socket error to a failure class. The one place socket errors are classified.
pub fn classify_io(e: &io::Error) -> FailureClass {
    use io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => FailureClass::TcpRefused,
        TimedOut | WouldBlock => FailureClass::TcpTimeout,
        HostUnreachable | NetworkUnreachable | AddrNotAvailable | NetworkDown => {
            FailureClass::TcpUnreachable
        }
        ConnectionReset | ConnectionAborted | BrokenPipe => FailureClass::TcpReset,
        UnexpectedEof => FailureClass::ServerGoneAway,
        // Bytes that are not the expected protocol (e.g. an HTTP server on the MySQL port).
        InvalidData | InvalidInput => FailureClass::ProtocolError,
        _ => match e.raw_os_error() {
            // EHOSTUNREACH, ENETUNREACH on Linux
            Some(113) | Some(101) => FailureClass::TcpUnreachable,
            _ => FailureClass::TcpReset,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_table() {
        use io::ErrorKind::*;
        let cases = [
            (ConnectionRefused, FailureClass::TcpRefused),
            (TimedOut, FailureClass::TcpTimeout),
            (HostUnreachable, FailureClass::TcpUnreachable),
            (NetworkUnreachable, FailureClass::TcpUnreachable),
            (ConnectionReset, FailureClass::TcpReset),
            (BrokenPipe, FailureClass::TcpReset),
            (UnexpectedEof, FailureClass::ServerGoneAway),
            (InvalidData, FailureClass::ProtocolError),
        ];
        for (kind, want) in cases {
            assert_eq!(classify_io(&io::Error::from(kind)), want, "{kind:?}");
        }
        assert_eq!(
            classify_io(&io::Error::from_raw_os_error(113)),
            FailureClass::TcpUnreachable
        );
    }

    #[tokio::test]
    async fn refused_port_is_tcp_refused() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let e = connect(
            &["127.0.0.1".parse().unwrap()],
            port,
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert_eq!(e.class, FailureClass::TcpRefused);
    }
}
