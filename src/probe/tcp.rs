//! The `tcp` probe kind: after `resolve` and `connect`, an optional `tls` handshake checked
//! against the endpoint name. A liveness-level probe: it proves the port answers (and the
//! certificate), not that the branch can do its job.

use crate::failure::Step;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{Deadline, StepError, Steps};

/// How long the `tls` step listens after the handshake for a post-handshake rejection.
pub const LISTEN_AFTER_HANDSHAKE: std::time::Duration = std::time::Duration::from_millis(250);

/// A prepared tcp probe.
#[derive(Debug, Clone)]
pub struct TcpTarget {
    /// rustls client configuration (`None` when ssl_mode is disabled).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// Run the `tls` step when enabled; close the connection politely.
pub async fn run(
    target: &TcpTarget,
    steps: &mut Steps,
    deadline: &Deadline,
    mut stream: TcpStream,
    endpoint: &str,
    tls_out: &mut Option<super::tls::TlsInfo>,
) -> Result<(), (Step, StepError)> {
    match &target.tls {
        Some(cfg) => {
            let cfg = cfg.clone();
            let (mut tls, info) = steps
                .run(Step::Tls, deadline.step(Step::Tls), async move {
                    super::tls::handshake(cfg, endpoint, stream).await
                })
                .await
                .map_err(|e| (Step::Tls, e))?;
            // Under TLS 1.3 a server rejects a client certificate only after the handshake, with
            // an alert: listen briefly (outside the step's measured duration, within the attempt
            // deadline) so that is not taken for success. Only an alert is a rejection; a plain
            // close after the handshake is not.
            let listen = LISTEN_AFTER_HANDSHAKE.min(
                deadline
                    .end
                    .saturating_duration_since(tokio::time::Instant::now()),
            );
            let mut byte = [0u8; 1];
            if let Ok(Err(e)) =
                tokio::time::timeout(listen, tokio::io::AsyncReadExt::read(&mut tls, &mut byte))
                    .await
                && let Some(alert @ rustls::Error::AlertReceived(_)) =
                    e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
            {
                let class = super::tls::classify_tls(alert);
                steps.fail_last(class);
                return Err((
                    Step::Tls,
                    StepError {
                        class,
                        message: format!(
                            "the server rejected the session after the TLS handshake with {endpoint}: {alert}"
                        ),
                    },
                ));
            }
            let _ = tls.shutdown().await;
            *tls_out = Some(info);
        }
        None => {
            let _ = stream.shutdown().await;
        }
    }
    Ok(())
}
