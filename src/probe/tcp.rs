//! The `tcp` probe kind: after `resolve` and `connect`, an optional `tls` handshake checked
//! against the endpoint name. A liveness-level probe: it proves the port answers (and the
//! certificate), not that the branch can do its job.

use crate::failure::Step;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{Deadline, StepError, Steps};

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
            let info = steps
                .run(Step::Tls, deadline.step(Step::Tls), async move {
                    let (mut tls, info) = super::tls::handshake(cfg, endpoint, stream).await?;
                    let _ = tls.shutdown().await;
                    Ok(info)
                })
                .await
                .map_err(|e| (Step::Tls, e))?;
            *tls_out = Some(info);
        }
        None => {
            let _ = stream.shutdown().await;
        }
    }
    Ok(())
}
