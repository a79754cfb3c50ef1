//! The `tcp` probe kind: after `resolve` and `connect`, an optional `tls` handshake checked
//! against the endpoint name. A liveness-level probe: it proves the port answers (and the
//! certificate), not that the branch can do its job.

use crate::failure::Step;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::connect::Connected;
use super::ctx::{StepCtx, StepFailure};
pub use super::target::TcpTarget;

/// How long the `tls` step listens after the handshake for a post-handshake rejection.
pub const LISTEN_AFTER_HANDSHAKE: std::time::Duration = std::time::Duration::from_millis(250);

/// Run the `tls` step when enabled; close the connection politely.
///
/// # Errors
/// The `tls` step's failure, including an alert the server sends just after the handshake.
pub async fn run(
    ctx: &mut StepCtx<'_>,
    _target: &TcpTarget,
    Connected { mut stream, .. }: Connected,
) -> Result<(), StepFailure> {
    let Some(cfg) = ctx.tls else {
        let _ = stream.shutdown().await;
        return Ok(());
    };
    let mut tls = super::tls::run(ctx, cfg.clone(), stream).await?;
    // Under TLS 1.3 a server rejects a client certificate only after the handshake, with an
    // alert: listen briefly (outside the step's measured duration, within the attempt deadline)
    // so that is not taken for success. Only an alert is a rejection; a plain close after the
    // handshake is not.
    let listen = LISTEN_AFTER_HANDSHAKE.min(ctx.steps.deadline.left());
    let mut byte = [0u8; 1];
    if let Ok(Err(e)) = tokio::time::timeout(listen, tls.read(&mut byte)).await
        && let Some(alert @ rustls::Error::AlertReceived(_)) =
            e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
    {
        let message = format!(
            "the server rejected the session after the TLS handshake with {}: {alert}",
            ctx.endpoint()
        );
        let class = super::tls::classify_tls(alert);
        return Err(ctx.steps.fail_last(Step::Tls, class, message));
    }
    let _ = tls.shutdown().await;
    Ok(())
}
