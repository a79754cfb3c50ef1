//! The one table of AWS error codes the prober acts on (pure): which codes mean the caller may
//! not make the call, the credentials expired or are not accepted, AWS throttled, AWS failed,
//! or the resource is not there. The CloudWatch publish classifier, `check --aws` and the
//! Secrets Manager reader read it.

/// What an AWS error code says about a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum CodeKind {
    /// The credentials may not make the call (IAM).
    AccessDenied,
    /// The credentials (a session token, a signed request) have expired.
    ExpiredCredentials,
    /// AWS does not accept the credentials: unknown key, bad signature, none sent.
    InvalidCredentials,
    /// Throttled (after the SDK's retries, if any): a later try may succeed.
    Throttled,
    /// A fault of the service: a later try may succeed.
    ServerFault,
    /// The named resource does not exist (or is deleted).
    NotFound,
}

impl CodeKind {
    /// Whether the credentials in use are the cause (denied, expired or not accepted).
    pub fn is_credentials(self) -> bool {
        matches!(
            self,
            CodeKind::AccessDenied | CodeKind::ExpiredCredentials | CodeKind::InvalidCredentials
        )
    }
}

/// Every code, as the query (CloudWatch, STS), REST-XML (Route 53, S3) and JSON protocols
/// spell it.
const CODES: &[(&str, CodeKind)] = &[
    ("AccessDenied", CodeKind::AccessDenied),
    ("AccessDeniedException", CodeKind::AccessDenied),
    ("UnauthorizedOperation", CodeKind::AccessDenied),
    ("NotAuthorized", CodeKind::AccessDenied),
    ("ExpiredToken", CodeKind::ExpiredCredentials),
    ("ExpiredTokenException", CodeKind::ExpiredCredentials),
    ("RequestExpired", CodeKind::ExpiredCredentials),
    ("InvalidClientTokenId", CodeKind::InvalidCredentials),
    ("UnrecognizedClientException", CodeKind::InvalidCredentials),
    ("SignatureDoesNotMatch", CodeKind::InvalidCredentials),
    ("InvalidSignatureException", CodeKind::InvalidCredentials),
    ("IncompleteSignature", CodeKind::InvalidCredentials),
    ("MissingAuthenticationToken", CodeKind::InvalidCredentials),
    ("Throttling", CodeKind::Throttled),
    ("ThrottlingException", CodeKind::Throttled),
    ("Throttled", CodeKind::Throttled),
    ("RequestLimitExceeded", CodeKind::Throttled),
    ("PriorRequestNotComplete", CodeKind::Throttled),
    ("TooManyRequestsException", CodeKind::Throttled),
    ("SlowDown", CodeKind::Throttled),
    ("InternalServiceError", CodeKind::ServerFault),
    ("InternalFailure", CodeKind::ServerFault),
    ("ServiceUnavailable", CodeKind::ServerFault),
    ("InternalError", CodeKind::ServerFault),
    ("InternalServiceErrorException", CodeKind::ServerFault),
    ("ResourceNotFoundException", CodeKind::NotFound),
];

/// The kind of an AWS error code; `None` for a code the table does not name (the caller
/// falls back on the HTTP status or a generic reason).
pub fn kind_of(code: &str) -> Option<CodeKind> {
    CODES.iter().find(|(c, _)| *c == code).map(|(_, k)| *k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_has_one_kind() {
        for (i, (code, _)) in CODES.iter().enumerate() {
            assert!(
                CODES[i + 1..].iter().all(|(c, _)| c != code),
                "{code} is listed twice"
            );
        }
    }

    #[test]
    fn codes_classify_by_what_they_say() {
        use CodeKind as K;
        for (code, kind) in [
            ("AccessDenied", Some(K::AccessDenied)),
            ("AccessDeniedException", Some(K::AccessDenied)),
            ("ExpiredToken", Some(K::ExpiredCredentials)),
            ("SignatureDoesNotMatch", Some(K::InvalidCredentials)),
            ("Throttling", Some(K::Throttled)),
            ("PriorRequestNotComplete", Some(K::Throttled)),
            ("InternalFailure", Some(K::ServerFault)),
            ("InvalidParameterValue", None),
            ("NoSuchHostedZone", None),
            ("ResourceNotFoundException", Some(K::NotFound)),
            ("throttling", None),
        ] {
            assert_eq!(kind_of(code), kind, "{code}");
        }
        assert!(K::ExpiredCredentials.is_credentials());
        assert!(!K::Throttled.is_credentials() && !K::ServerFault.is_credentials());
    }
}
