//! Reading one secret's current value from AWS Secrets Manager (`GetSecretValue`), with the
//! prober's credentials; a failure is classed through [`super::codes`] and said in one line
//! that never holds the value.

use super::{AwsTarget, Retries, Timeouts};
use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use std::time::Duration;

/// Bound of one `GetSecretValue` call, its tries included.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response read, bytes: a `SecretString` is at most 64 KiB, JSON-escaped in the answer.
pub const MAX_RESPONSE_BYTES: usize = 512 * 1024;

/// Why a secret could not be read; `class` is a stable snake_case name for logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{class}: {message}")]
pub struct FetchError {
    /// `access_denied`, `expired_credentials`, `invalid_credentials`, `throttled`,
    /// `server_fault`, `not_found`, `credentials` (none could be had), `timeout`,
    /// `unreachable`, `rejected` (another refusal) or `not_a_string` (a binary secret).
    pub class: &'static str,
    /// The service's code and message, or what the connection did.
    pub message: String,
}

/// A Secrets Manager client for one region (`None`: the default chain's).
#[derive(Debug, Clone)]
pub struct SecretsClient(aws_sdk_secretsmanager::Client);

impl SecretsClient {
    /// A client from the default chain (credentials, endpoint) in `region`.
    pub async fn new(region: Option<&str>) -> SecretsClient {
        let target = AwsTarget {
            region: region.map(str::to_string),
            endpoint_url: None,
            timeouts: Timeouts::per_call(OPERATION_TIMEOUT),
            retries: Retries::Standard(3),
            max_response_bytes: MAX_RESPONSE_BYTES,
            role: None,
        };
        let conf = target.session().await.secrets_manager().build();
        SecretsClient(aws_sdk_secretsmanager::Client::from_conf(conf))
    }

    /// The current (`AWSCURRENT`) `SecretString` of the secret named `id` (a name or an ARN).
    ///
    /// # Errors
    /// [`FetchError`] when the call fails or the secret holds binary data only.
    pub async fn secret_string(&self, id: &str) -> Result<String, FetchError> {
        if self.0.config().region().is_none() {
            // The SDK would say "missing signing region", which names no setting to fix.
            return Err(FetchError {
                class: "unreachable",
                message: "no AWS region: set AWS_REGION, or `region` in the reference".into(),
            });
        }
        let out = self
            .0
            .get_secret_value()
            .secret_id(id)
            .send()
            .await
            .map_err(|e| classify(&e))?;
        out.secret_string.ok_or_else(|| FetchError {
            class: "not_a_string",
            message: "the secret holds binary data (SecretBinary); only SecretString is read"
                .into(),
        })
    }
}

/// The class and one-line cause of a failed call.
fn classify<E, R>(e: &SdkError<E, R>) -> FetchError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    let credentials = || chain(e).to_ascii_lowercase().contains("credential");
    let (class, message) = match e {
        SdkError::ServiceError(s) => {
            let code = s.err().code().unwrap_or("error");
            let class = match super::kind_of(code) {
                Some(k) => k.into(),
                None if code == "DecryptionFailure" => "access_denied",
                None => "rejected",
            };
            let message = format!("{code}: {}", s.err().message().unwrap_or("(no message)"));
            (class, message)
        }
        SdkError::TimeoutError(_) => ("timeout", chain(e)),
        SdkError::DispatchFailure(d) if d.as_connector_error().is_some_and(|c| c.is_timeout()) => {
            ("timeout", chain(e))
        }
        SdkError::DispatchFailure(_) | SdkError::ConstructionFailure(_) if credentials() => {
            ("credentials", chain(e))
        }
        _ => ("unreachable", chain(e)),
    };
    FetchError {
        class,
        message: bounded(&message),
    }
}

/// `e` and its sources, joined with `: `.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        msg = format!("{msg}: {x}");
        src = x.source();
    }
    msg
}

/// One line of at most 300 characters.
fn bounded(s: &str) -> String {
    const MAX: usize = 300;
    let line: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match line.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_secretsmanager::config::http::HttpResponse;
    use aws_sdk_secretsmanager::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_secretsmanager::operation::get_secret_value::GetSecretValueError;
    type E = SdkError<GetSecretValueError, HttpResponse>;

    fn answered(code: &str) -> E {
        let response = HttpResponse::new(
            http::StatusCode::BAD_REQUEST.into(),
            aws_smithy_types::body::SdkBody::empty(),
        );
        let meta = ErrorMetadata::builder()
            .code(code)
            .message("said\nwhy")
            .build();
        SdkError::service_error(GetSecretValueError::generic(meta), response)
    }

    /// Each code by the one table; the message on one line.
    #[test]
    fn a_failed_read_is_classed_by_its_code_or_its_transport() {
        for (code, class) in [
            ("AccessDeniedException", "access_denied"),
            ("ExpiredTokenException", "expired_credentials"),
            ("UnrecognizedClientException", "invalid_credentials"),
            ("ThrottlingException", "throttled"),
            ("InternalServiceError", "server_fault"),
            ("ResourceNotFoundException", "not_found"),
            ("DecryptionFailure", "access_denied"),
            ("InvalidRequestException", "rejected"),
        ] {
            let e = classify(&answered(code));
            assert_eq!(e.class, class, "{code}");
            assert_eq!(e.message, format!("{code}: said why"));
        }
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e: E = SdkError::dispatch_failure(ConnectorError::io(Box::new(refused)));
        assert_eq!(classify(&e).class, "unreachable");
        let e: E = SdkError::timeout_error("slow");
        assert_eq!(classify(&e).class, "timeout");
        let long: E =
            SdkError::dispatch_failure(ConnectorError::other("x ".repeat(1000).into(), None));
        assert!(classify(&long).message.chars().count() <= 301);
    }

    /// A client without a region fails before any request, naming what to set.
    #[tokio::test]
    async fn no_region_says_what_to_set() {
        let conf = aws_sdk_secretsmanager::Config::builder()
            .behavior_version(aws_sdk_secretsmanager::config::BehaviorVersion::latest())
            .build();
        let client = SecretsClient(aws_sdk_secretsmanager::Client::from_conf(conf));
        let e = client.secret_string("orders-db").await.unwrap_err();
        assert_eq!(e.class, "unreachable");
        assert!(e.message.contains("set AWS_REGION"), "{e}");
    }
}
