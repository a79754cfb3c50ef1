//! The token checked against SigV4 computed here from the specification (canonical request,
//! string to sign, the HMAC chain), with fixed credentials and time: not by the signer.

use super::*;
use aws_lc_rs::{digest, hmac};

const KEY_ID: &str = "AKIDEXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
/// 2015-08-30T12:36:00Z.
const AT_SECS: u64 = 1_440_938_160;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
        .as_ref()
        .to_vec()
}

/// SigV4 query-string signing of `GET https://host:port/?Action=connect&DBUser=user`, by hand.
fn expected(what: &TokenFor, encoded_user: &str, session_token: Option<&str>) -> String {
    let (date, stamp) = ("20150830", "20150830T123600Z");
    let scope = format!("{date}/{}/rds-db/aws4_request", what.region);
    let mut query = vec![
        ("Action".to_string(), "connect".to_string()),
        ("DBUser".into(), encoded_user.into()),
        ("X-Amz-Algorithm".into(), "AWS4-HMAC-SHA256".into()),
        (
            "X-Amz-Credential".into(),
            format!("{KEY_ID}/{scope}").replace('/', "%2F"),
        ),
        ("X-Amz-Date".into(), stamp.into()),
        ("X-Amz-Expires".into(), "900".into()),
        ("X-Amz-SignedHeaders".into(), "host".into()),
    ];
    if let Some(t) = session_token {
        let encoded = utf8_percent_encode(t, QUERY_VALUE).to_string();
        query.push(("X-Amz-Security-Token".into(), encoded));
    }
    query.sort();
    let canonical_query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let canonical_query = canonical_query.join("&");
    let empty_payload = hex(digest::digest(&digest::SHA256, b"").as_ref());
    let canonical_request = format!(
        "GET\n/\n{canonical_query}\nhost:{}:{}\n\nhost\n{empty_payload}",
        what.host, what.port
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical_request.as_bytes()).as_ref())
    );
    let k_date = hmac(format!("AWS4{SECRET}").as_bytes(), date);
    let k_region = hmac(&k_date, &what.region);
    let k_service = hmac(&k_region, "rds-db");
    let k_signing = hmac(&k_service, "aws4_request");
    let signature = hex(&hmac(&k_signing, &string_to_sign));
    format!(
        "{}:{}/?{canonical_query}&X-Amz-Signature={signature}",
        what.host, what.port
    )
}

fn params(token: &str) -> Vec<(String, String)> {
    let query = token.split_once("/?").expect("a query").1;
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .map(|p| {
            let (k, v) = p.split_once('=').expect("key=value");
            (k.to_string(), v.to_string())
        })
        .collect();
    pairs.sort();
    pairs
}

#[test]
fn the_token_is_sigv4_as_the_specification_computes_it() {
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(AT_SECS);
    for (user, encoded, session_token) in [
        ("readyprobe", "readyprobe", None),
        ("probe@app", "probe%40app", None),
        (
            "readyprobe",
            "readyprobe",
            Some("FwoGZXIvYXdz/EXAMPLE+token="),
        ),
    ] {
        let what = TokenFor {
            region: "eu-west-1".into(),
            host: "orders.cluster-c1x2.eu-west-1.rds.amazonaws.com".into(),
            port: 5432,
            user: user.into(),
        };
        let creds = Credentials::new(KEY_ID, SECRET, session_token.map(str::to_string), None, "t");
        let got = sign(&what, creds, at).unwrap();
        let want = expected(&what, encoded, session_token);
        assert!(!got.starts_with("https://"), "{got}");
        assert!(got.starts_with(&format!("{}:5432/?", what.host)), "{got}");
        // The order of the query's parameters is not signed; their values and the signature are.
        assert_eq!(params(&got), params(&want), "{user}");
    }
}

#[test]
fn a_token_names_its_expiry_and_never_the_secret_key() {
    let what = TokenFor {
        region: "us-east-2".into(),
        host: "db.internal.example".into(),
        port: 3306,
        user: "readyprobe".into(),
    };
    let creds = Credentials::new(KEY_ID, SECRET, None, None, "t");
    let token = sign(&what, creds, SystemTime::now()).unwrap();
    assert!(token.contains("X-Amz-Expires=900"), "{token}");
    assert!(
        token.contains("Action=connect&DBUser=readyprobe"),
        "{token}"
    );
    assert!(!token.contains("EXAMPLEKEY"), "{token}");
    assert_eq!(
        what.to_string(),
        "RDS IAM token for user readyprobe at db.internal.example:3306 (us-east-2)"
    );
}

#[tokio::test]
async fn no_credentials_names_the_cause_and_how_to_provide_them() {
    use aws_credential_types::provider::error::CredentialsError;
    let none = aws_credential_types::credential_fn::provide_credentials_fn(|| async {
        Err(CredentialsError::not_loaded(
            "no providers in chain provided credentials",
        ))
    });
    let signer = Signer(aws_credential_types::provider::SharedCredentialsProvider::new(none));
    let what = TokenFor {
        region: "eu-west-1".into(),
        host: "db.internal.example".into(),
        port: 5432,
        user: "readyprobe".into(),
    };
    let err = signer.token(&what).await.unwrap_err();
    assert!(
        err.contains("no providers in chain provided credentials"),
        "{err}"
    );
    assert!(err.contains("AWS_ACCESS_KEY_ID"), "{err}");
    assert!(err.contains("task role"), "{err}");
}
