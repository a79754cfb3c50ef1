//! Builds every AWS SDK client (CloudWatch, Route 53, S3, Secrets Manager) from one [`AwsTarget`]: the default
//! credentials chain, the region (the target's, else the chain's), the endpoint override, the
//! timeouts, the tries, and the cap on response bodies.

use std::time::Duration;

/// Longest wait for a TCP/TLS connection to an AWS endpoint, unless the call's own timeout is
/// shorter.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The SDK's timeouts of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// The whole call, every try included.
    pub operation: Duration,
    /// One try.
    pub attempt: Duration,
    /// Connecting.
    pub connect: Duration,
}

impl Timeouts {
    /// `operation` for the call and for each of its tries, and a connect timeout of
    /// [`CONNECT_TIMEOUT`] or `operation` if shorter.
    pub fn per_call(operation: Duration) -> Timeouts {
        Timeouts {
            operation,
            attempt: operation,
            connect: CONNECT_TIMEOUT.min(operation),
        }
    }
}

/// How the SDK retries a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retries {
    /// The SDK's default (standard mode, 3 tries).
    SdkDefault,
    /// One try: the caller retries itself (so that every try is seen).
    Off,
    /// Standard mode (backoff on throttling and transient errors), this many tries in all.
    Standard(u32),
}

/// Where and how the clients of one purpose talk to AWS. Every client of the prober is built
/// from one: the sink's, the S3 store's, `drill report`'s and `check --aws`'s.
#[derive(Debug, Clone, PartialEq)]
pub struct AwsTarget {
    /// The region; `None`: the default chain's (`AWS_REGION`, the profile's).
    pub region: Option<String>,
    /// The endpoint override (an emulator, a VPC endpoint); `None`: the default chain's
    /// (`AWS_ENDPOINT_URL`), else AWS's.
    pub endpoint_url: Option<String>,
    /// The SDK's timeouts.
    pub timeouts: Timeouts,
    /// The SDK's tries.
    pub retries: Retries,
    /// Largest response body read, bytes: a hostile or broken endpoint cannot stream one for
    /// ever ([`super::BodyLimit`]).
    pub max_response_bytes: usize,
    /// The role every client of the target acts as, assumed through STS with the default
    /// chain's credentials; `None`: the chain's credentials themselves.
    pub role: Option<AssumeRoleSpec>,
}

/// An IAM role to assume with STS `AssumeRole`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssumeRoleSpec {
    /// The role's ARN.
    pub role_arn: String,
    /// The `ExternalId` its trust policy asks for.
    pub external_id: Option<String>,
    /// The `RoleSessionName`: who assumed it, in the role account's CloudTrail.
    pub session_name: String,
}

/// The one mapping from a configured publish target to the [`AwsTarget`] its clients are built
/// from (the sink's, `check --aws`'s, `drill report --alarms`'): its region, endpoint and role
/// (the session named after `prober_id`), with the caller's timeouts, tries and body cap.
pub fn target_for(
    t: &crate::config::PublishTarget,
    prober_id: &str,
    timeouts: Timeouts,
    retries: Retries,
    max_response_bytes: usize,
) -> AwsTarget {
    AwsTarget {
        region: t.region.clone(),
        endpoint_url: t.endpoint_url.clone(),
        timeouts,
        retries,
        max_response_bytes,
        role: t.role.as_ref().map(|r| AssumeRoleSpec {
            role_arn: r.role_arn.clone(),
            external_id: r.external_id.clone(),
            session_name: crate::config::session_name(prober_id),
        }),
    }
}

/// The loaded chain (region, credentials) of an [`AwsTarget`], from which its clients are built.
#[derive(Debug, Clone)]
pub struct Session {
    shared: aws_config::SdkConfig,
    target: AwsTarget,
}

impl AwsTarget {
    /// Load the default chain with the target's region, timeouts and tries. Credentials are
    /// resolved lazily, by the first call (or [`Session::sdk_config`]'s provider). With a
    /// role, the credentials are the role's ([`RoleCredentials`], STS `AssumeRole` over the
    /// default chain), cached by each client's identity cache and assumed again before they
    /// expire.
    pub async fn session(&self) -> Session {
        let t = self.timeouts;
        let retry = match self.retries {
            Retries::SdkDefault => None,
            Retries::Off => Some(aws_config::retry::RetryConfig::disabled()),
            Retries::Standard(n) => {
                Some(aws_config::retry::RetryConfig::standard().with_max_attempts(n))
            }
        };
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .operation_timeout(t.operation)
                    .operation_attempt_timeout(t.attempt)
                    .connect_timeout(t.connect)
                    .build(),
            );
        if let Some(r) = retry {
            loader = loader.retry_config(r);
        }
        if let Some(r) = &self.region {
            loader = loader.region(aws_config::Region::new(r.clone()));
        }
        let mut shared = loader.load().await;
        if let Some(role) = &self.role {
            let provider = RoleCredentials::new(&shared, role.clone(), self.max_response_bytes);
            shared = shared
                .into_builder()
                .credentials_provider(
                    aws_credential_types::provider::SharedCredentialsProvider::new(provider),
                )
                .build();
        }
        Session {
            shared,
            target: self.clone(),
        }
    }
}

/// The credentials of a role, from STS `AssumeRole` called with the chain's credentials (STS in
/// the target's region, at the chain's STS endpoint). aws-config's `AssumeRoleProvider` builds
/// its STS client without interceptors, so it would read an answer of any length: this one
/// carries the target's [`super::BodyLimit`] like every other client. Caching and renewal
/// before expiry are each client's identity cache's.
struct RoleCredentials {
    sts: aws_sdk_sts::Client,
    role: AssumeRoleSpec,
}

impl std::fmt::Debug for RoleCredentials {
    /// The role and session; never the external id.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoleCredentials")
            .field("role_arn", &self.role.role_arn)
            .field("session_name", &self.role.session_name)
            .finish_non_exhaustive()
    }
}

impl RoleCredentials {
    fn new(chain: &aws_config::SdkConfig, role: AssumeRoleSpec, max_body: usize) -> Self {
        // The chain's credentials are cached by the STS client's own identity cache only when
        // asked: as aws-config does, none here (each client caches the role's).
        let conf = chain
            .clone()
            .into_builder()
            .identity_cache(aws_config::identity::IdentityCache::no_cache())
            .build();
        let sts = aws_sdk_sts::config::Builder::from(&conf)
            .interceptor(super::BodyLimit(max_body))
            .build();
        RoleCredentials {
            sts: aws_sdk_sts::Client::from_conf(sts),
            role,
        }
    }

    async fn assume(&self) -> aws_credential_types::provider::Result {
        use aws_credential_types::provider::error::CredentialsError;
        let out = self
            .sts
            .assume_role()
            .role_arn(&self.role.role_arn)
            .role_session_name(&self.role.session_name)
            .set_external_id(self.role.external_id.clone())
            .send()
            .await
            .map_err(CredentialsError::provider_error)?;
        let c = out.credentials.ok_or_else(|| {
            CredentialsError::unhandled("STS answered AssumeRole without credentials")
        })?;
        let expiry = std::time::SystemTime::try_from(c.expiration).map_err(|_| {
            CredentialsError::unhandled("STS answered an expiration time out of range")
        })?;
        Ok(aws_credential_types::Credentials::new(
            c.access_key_id,
            c.secret_access_key,
            Some(c.session_token),
            Some(expiry),
            "readyprobe-assume-role",
        ))
    }
}

impl aws_credential_types::provider::ProvideCredentials for RoleCredentials {
    fn provide_credentials<'a>(
        &'a self,
    ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        aws_credential_types::provider::future::ProvideCredentials::new(self.assume())
    }
}

impl Session {
    /// The region the clients use; `None` when neither the target nor the chain has one.
    pub fn region(&self) -> Option<&str> {
        self.shared.region().map(aws_config::Region::as_ref)
    }

    /// The loaded chain (for asking its credentials provider up front).
    pub fn sdk_config(&self) -> &aws_config::SdkConfig {
        &self.shared
    }

    /// The same chain with another endpoint override (a second service of one check).
    #[must_use]
    pub fn at(&self, endpoint_url: Option<&str>) -> Session {
        let mut s = self.clone();
        s.target.endpoint_url = endpoint_url.map(str::to_string);
        s
    }

    /// The one place the response body limit is set, for every client.
    fn body_limit(&self) -> super::BodyLimit {
        super::BodyLimit(self.target.max_response_bytes)
    }

    /// A CloudWatch client config: the caller may add interceptors before building it.
    pub fn cloudwatch(&self) -> aws_sdk_cloudwatch::config::Builder {
        let mut b =
            aws_sdk_cloudwatch::config::Builder::from(&self.shared).interceptor(self.body_limit());
        if let Some(e) = &self.target.endpoint_url {
            b = b.endpoint_url(e);
        }
        b
    }

    /// A Route 53 client config: the caller may add interceptors before building it.
    pub fn route53(&self) -> aws_sdk_route53::config::Builder {
        let mut b =
            aws_sdk_route53::config::Builder::from(&self.shared).interceptor(self.body_limit());
        if let Some(e) = &self.target.endpoint_url {
            b = b.endpoint_url(e);
        }
        b
    }

    /// An S3 client config, with path-style addressing when an endpoint is given (as
    /// emulators and VPC endpoints need).
    pub fn s3(&self) -> aws_sdk_s3::config::Builder {
        let mut b = aws_sdk_s3::config::Builder::from(&self.shared)
            .force_path_style(self.target.endpoint_url.is_some())
            .interceptor(self.body_limit());
        if let Some(e) = &self.target.endpoint_url {
            b = b.endpoint_url(e);
        }
        b
    }

    /// A Secrets Manager client config (its endpoint, unless the target names one, from the
    /// chain: `AWS_ENDPOINT_URL_SECRETS_MANAGER`, `AWS_ENDPOINT_URL`).
    pub fn secrets_manager(&self) -> aws_sdk_secretsmanager::config::Builder {
        let mut b = aws_sdk_secretsmanager::config::Builder::from(&self.shared)
            .interceptor(self.body_limit());
        if let Some(e) = &self.target.endpoint_url {
            b = b.endpoint_url(e);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_timeout_caps_the_connect_timeout() {
        let short = Timeouts::per_call(Duration::from_secs(1));
        assert_eq!(short.connect, Duration::from_secs(1));
        assert_eq!(short.attempt, Duration::from_secs(1));
        let long = Timeouts::per_call(Duration::from_secs(30));
        assert_eq!(long.connect, CONNECT_TIMEOUT);
        assert_eq!(long.operation, Duration::from_secs(30));
    }

    #[tokio::test]
    async fn the_targets_region_wins_over_the_chains() {
        let target = AwsTarget {
            region: Some("eu-west-3".into()),
            endpoint_url: Some("http://127.0.0.1:9".into()),
            timeouts: Timeouts::per_call(Duration::from_secs(1)),
            retries: Retries::Off,
            max_response_bytes: 1024,
            role: None,
        };
        let s = target.session().await;
        assert_eq!(s.region(), Some("eu-west-3"));
        let cw = s.cloudwatch().build();
        assert_eq!(cw.region().map(AsRef::as_ref), Some("eu-west-3"));
        let r53 = s.at(None).route53().build();
        assert_eq!(r53.region().map(AsRef::as_ref), Some("eu-west-3"));
    }
}
