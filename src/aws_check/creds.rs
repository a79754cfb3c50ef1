//! The credentials `check --aws` signs with, asked of the default chain before any call: none
//! found, expired or misconfigured ones end the check with a plain message and how to provide
//! them (exit 77: nothing could be checked); a credentials source that does not answer ends it
//! as AWS unreachable does (exit 74).

use super::limits::{Call, Cut, Deadline};
use super::model::{Failure, Unchecked};
use super::{EXIT_IO, EXIT_NOT_CHECKED};
use aws_credential_types::Credentials;
use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::provider::error::CredentialsError;
use std::time::SystemTime;

/// The "call" the deadline names while the chain is asked.
const CREDENTIALS: Call = Call {
    name: "loading credentials",
    action: "",
    endpoint_key: "the credentials source (instance or task metadata, STS, SSO)",
};

/// How to provide credentials, for every message that says there are none usable.
const PROVIDE: &str = "provide them through the default chain: AWS_PROFILE=<profile> (after `aws sso login` for an SSO profile), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN for temporary ones), or run where an ECS task role or EC2 instance role is attached";

/// Ask the chain of `shared` for credentials, within the deadline.
///
/// # Errors
/// The [`Failure`] when there are none usable.
pub async fn usable(shared: &aws_config::SdkConfig, deadline: &Deadline) -> Result<(), Failure> {
    let Some(provider) = shared.credentials_provider() else {
        return classify(
            Err(CredentialsError::not_loaded("no credentials provider")),
            SystemTime::now(),
        );
    };
    match deadline
        .run(CREDENTIALS, provider.provide_credentials())
        .await
    {
        Ok(got) => classify(got, SystemTime::now()),
        Err(c) => {
            let why = match c {
                Cut::Unreachable(why) | Cut::NotChecked(Unchecked { why, .. }) => why,
            };
            Err(Failure {
                exit: EXIT_IO,
                kind: "credentials",
                message: format!("the AWS credentials source did not answer: {why}"),
                fix: "check the credentials source the chain uses (instance or task metadata, STS, SSO) and the network path to it, or raise --aws-timeout".into(),
            })
        }
    }
}

/// What the chain's answer means at `now`.
///
/// # Errors
/// The [`Failure`] for no, expired or unloadable credentials.
pub fn classify(
    got: Result<Credentials, CredentialsError>,
    now: SystemTime,
) -> Result<(), Failure> {
    let fail = |exit, message: String, fix: &str| {
        Err(Failure {
            exit,
            kind: "credentials",
            message,
            fix: fix.to_string(),
        })
    };
    let e = match got {
        Ok(c) => {
            return match c.expiry().filter(|t| *t <= now) {
                Some(t) => fail(
                    EXIT_NOT_CHECKED,
                    format!(
                        "the AWS credentials expired at {}",
                        humantime::format_rfc3339_seconds(t)
                    ),
                    &format!("renew them, or {PROVIDE}"),
                ),
                None => Ok(()),
            };
        }
        Err(e) => e,
    };
    let cause = crate::aws::cause::cause(&e);
    match e {
        CredentialsError::CredentialsNotLoaded(_) => fail(
            EXIT_NOT_CHECKED,
            format!(
                "no AWS credentials found: the default chain (environment, AWS_PROFILE or the default profile, web identity, ECS task role, EC2 instance role) has none ({cause})"
            ),
            PROVIDE,
        ),
        CredentialsError::InvalidConfiguration(_) => fail(
            EXIT_NOT_CHECKED,
            format!("the AWS credentials configuration is invalid: {cause}"),
            &format!(
                "fix the profile (AWS_PROFILE, ~/.aws/config, ~/.aws/credentials), or {PROVIDE}"
            ),
        ),
        CredentialsError::ProviderError(_) => fail(
            EXIT_NOT_CHECKED,
            format!("a source in the AWS credential chain failed: {cause}"),
            &format!(
                "fix the source the message names (an expired SSO session: `aws sso login`; a role that cannot be assumed: its trust policy; metadata refused: the instance or task role), or {PROVIDE}"
            ),
        ),
        _ => fail(
            EXIT_IO,
            format!("the AWS credentials source did not answer: {cause}"),
            "check the network path to the credentials source (instance or task metadata endpoint, STS, SSO)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn no_expired_or_unloadable_credentials_say_so_and_how_to_provide_them() {
        let now = SystemTime::now();
        let none = classify(
            Err(CredentialsError::not_loaded("no providers in chain")),
            now,
        )
        .expect_err("none");
        assert_eq!(none.exit, EXIT_NOT_CHECKED);
        assert!(
            none.message.starts_with("no AWS credentials found"),
            "{none:?}"
        );
        assert!(
            none.fix.contains("AWS_PROFILE") && none.fix.contains("role"),
            "{none:?}"
        );

        let past = now - Duration::from_secs(60);
        let old = Credentials::new("AKID", "secret", Some("token".into()), Some(past), "test");
        let expired = classify(Ok(old), now).expect_err("expired");
        assert_eq!(expired.exit, EXIT_NOT_CHECKED);
        assert!(expired.message.contains("expired at"), "{expired:?}");

        let later = now + Duration::from_secs(600);
        let fresh = Credentials::new("AKID", "secret", None, Some(later), "test");
        assert_eq!(classify(Ok(fresh), now), Ok(()));
        let static_ = Credentials::new("AKID", "secret", None, None, "test");
        assert_eq!(classify(Ok(static_), now), Ok(()));

        let slow = classify(
            Err(CredentialsError::provider_timed_out(Duration::from_secs(5))),
            now,
        )
        .expect_err("timed out");
        assert_eq!(slow.exit, EXIT_IO);
        let sso = classify(
            Err(CredentialsError::provider_error("the SSO token expired")),
            now,
        )
        .expect_err("provider");
        assert_eq!(sso.exit, EXIT_NOT_CHECKED);
        assert!(sso.message.contains("the SSO token expired"), "{sso:?}");
    }
}
