//! RDS IAM database authentication: the token a database user logs in with instead of a
//! password, signed with the prober's credentials by the SDK's SigV4 signer.
//!
//! A token is the presigned URL `https://HOST:PORT/?Action=connect&DBUser=USER` (service
//! `rds-db`, query-string signing, valid [`TOKEN_LIFETIME`]) without its scheme. Signing is
//! local; only the credentials may need a call: the default chain's provider is asked at each
//! signing (no cache sits in front of it; a token is signed every few minutes, not per attempt).

use super::{AwsTarget, Retries, Timeouts};
use aws_credential_types::Credentials;
use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SignatureLocation, SigningSettings};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use std::time::{Duration, SystemTime};

/// How long RDS accepts a token after it was signed (its `X-Amz-Expires`).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(900);
/// The SigV4 service name of database logins.
const SERVICE: &str = "rds-db";
/// How to give the prober credentials, for the message that says it has none.
const PROVIDE: &str = "the default chain takes them from the ECS task role (or EC2 instance role), \
    AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY";
/// Bound of getting the credentials (the instance or task metadata endpoint, STS).
const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(10);
/// SigV4's unreserved characters stay as they are in the canonical query; the rest is encoded.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// What a token is for: one database user at one endpoint, in one region.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenFor {
    /// The region of the database (the token's credential scope).
    pub region: String,
    /// The endpoint name the probe connects to.
    pub host: String,
    /// The port it connects to.
    pub port: u16,
    /// The database user.
    pub user: String,
}

impl std::fmt::Display for TokenFor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RDS IAM token for user {} at {}:{} ({})",
            self.user, self.host, self.port, self.region
        )
    }
}

/// The token for `what`, signed with `creds` at `at`.
///
/// # Errors
/// The signer's reason (a host or user that makes no URL); never a secret.
pub fn sign(what: &TokenFor, creds: Credentials, at: SystemTime) -> Result<String, String> {
    let url = format!(
        "https://{}:{}/?Action=connect&DBUser={}",
        what.host,
        what.port,
        utf8_percent_encode(&what.user, QUERY_VALUE)
    );
    let mut settings = SigningSettings::default();
    settings.expires_in = Some(TOKEN_LIFETIME);
    settings.signature_location = SignatureLocation::QueryParams;
    let identity = creds.into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(&what.region)
        .name(SERVICE)
        .time(at)
        .settings(settings)
        .build()
        .map_err(|e| format!("cannot sign: {e}"))?
        .into();
    let request = SignableRequest::new("GET", &url, std::iter::empty(), SignableBody::Bytes(&[]))
        .map_err(|e| format!("cannot sign for {}:{}: {e}", what.host, what.port))?;
    let (instructions, _) = aws_sigv4::http_request::sign(request, &params)
        .map_err(|e| format!("cannot sign: {e}"))?
        .into_parts();
    let mut signed = http::Request::builder()
        .uri(&url)
        .body(())
        .map_err(|e| format!("cannot sign for {}:{}: {e}", what.host, what.port))?;
    instructions.apply_to_request_http1x(&mut signed);
    let uri = signed.uri().to_string();
    Ok(uri.strip_prefix("https://").unwrap_or(&uri).to_string())
}

/// The prober's credentials for signing in `region`: the default chain's (environment, profile,
/// web identity, the task's or instance's role), asked at each signing.
#[derive(Debug, Clone)]
pub struct Signer(aws_credential_types::provider::SharedCredentialsProvider);

impl Signer {
    /// The default chain for `region`.
    ///
    /// # Errors
    /// When the chain has no credentials provider.
    pub async fn new(region: &str) -> Result<Signer, String> {
        let target = AwsTarget {
            region: Some(region.to_string()),
            endpoint_url: None,
            timeouts: Timeouts::per_call(CREDENTIALS_TIMEOUT),
            retries: Retries::Standard(3),
            max_response_bytes: 64 * 1024,
            role: None,
        };
        let session = target.session().await;
        session
            .sdk_config()
            .credentials_provider()
            .map(Signer)
            .ok_or_else(|| "no AWS credentials provider is configured".into())
    }

    /// A signer with these credentials (a tool that holds its own; a test's fixed ones).
    pub fn fixed(creds: Credentials) -> Signer {
        Signer(aws_credential_types::provider::SharedCredentialsProvider::new(creds))
    }

    /// A fresh token for `what`, signed now.
    ///
    /// # Errors
    /// Why the credentials could not be had, or the signer's reason.
    pub async fn token(&self, what: &TokenFor) -> Result<String, String> {
        let creds = tokio::time::timeout(CREDENTIALS_TIMEOUT, self.0.provide_credentials())
            .await
            .map_err(|_| format!("no AWS credentials within {CREDENTIALS_TIMEOUT:?} to sign with"))?
            .map_err(|e| {
                format!(
                    "no AWS credentials to sign with ({}): {PROVIDE}",
                    super::cause::cause(&e)
                )
            })?;
        sign(what, creds, SystemTime::now())
    }
}

#[cfg(test)]
mod tests;
