//! AWS region names: the one rule every `region` key of the config follows (a branch's, a
//! publish target's, `[publish.cloudwatch]`'s, `[state.s3]`'s, `[evidence.s3]`'s, a secret
//! reference's, `rds_iam`'s).

/// Most characters of a rejected name an error quotes.
const SHOWN_CHARS: usize = 60;

/// Why `r` is not an AWS region name, `None` when it is one: a prefix of 2–4 letters, one to
/// three words of letters, and a number from 1 to 99, all lower case and joined by `-`, e.g.
/// `us-east-1`, `eu-central-2`, `us-gov-west-1`, `cn-north-1`, `us-isob-east-1`,
/// `eusc-de-east-1`. The error quotes at most 60 characters of `r`.
pub(super) fn region_problem(r: &str) -> Option<String> {
    let letters = |s: &str, most: usize| {
        (1..=most).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase())
    };
    let labels: Vec<&str> = r.split('-').collect();
    let ok = match labels.as_slice() {
        [prefix, words @ .., number] if (1..=3).contains(&words.len()) => {
            prefix.len() >= 2
                && letters(prefix, 4)
                && words.iter().all(|w| letters(w, 12))
                && (1..=2).contains(&number.len())
                && number.bytes().all(|b| b.is_ascii_digit())
                && !number.starts_with('0')
        }
        _ => false,
    };
    (!ok).then(|| {
        let shown: String = r.chars().take(SHOWN_CHARS).collect();
        format!("{shown:?} is not an AWS region name (e.g. \"eu-west-1\", \"us-gov-west-1\")")
    })
}

/// Longest region name an S3-compatible store's endpoint may be given.
const MAX_STORE_REGION_CHARS: usize = 64;

/// Why `r` is not a region for an S3 bucket, `None` when it is: an AWS name
/// ([`region_problem`]), or, when `endpoint_url` is set (an S3-compatible store: MinIO,
/// Garage, Ceph...), any name of 1–64 lower-case letters, digits and `-` (`garage`,
/// `default`, `us-east-1`): such stores name their regions as they like.
pub(super) fn s3_region_problem(r: &str, endpoint_url: bool) -> Option<String> {
    if !endpoint_url {
        return region_problem(r);
    }
    let ok = (1..=MAX_STORE_REGION_CHARS).contains(&r.len())
        && r.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    (!ok).then(|| {
        let shown: String = r.chars().take(SHOWN_CHARS).collect();
        format!(
            "{shown:?} is not a region name: with endpoint_url, 1–{MAX_STORE_REGION_CHARS} lower-case letters, digits and \"-\" (e.g. \"garage\", \"us-east-1\")"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_names_follow_aws_shape() {
        for ok in [
            "us-east-1",
            "us-west-2",
            "eu-central-2",
            "eu-west-1",
            "us-gov-west-1",
            "cn-north-1",
            "cn-northwest-1",
            "ap-southeast-4",
            "ap-northeast-3",
            "me-central-1",
            "il-central-1",
            "mx-central-1",
            "us-isob-east-1",
            "eusc-de-east-1",
            "us-east-10",
        ] {
            assert_eq!(region_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "EU",
            "EU-WEST-1",
            "Eu-west-1",
            "eu-west",
            "euwest",
            "euwest1",
            "eu-1",
            "eu_west_1",
            "eu west 1",
            "EU West",
            "-eu-west-1",
            "eu-west-1-",
            "eu--west-1",
            "eu-west-01",
            "eu-west-0",
            "eu-west-100",
            "eu-west-x",
            "e-west-1",
            "europe-west1",
            "europe-west-1",
            "eu-west-1a",
            "us-east-1.",
            "eu-wést-1",
            "1-east-1",
            "eu-a-b-c-d-1",
            "eu-westwestwestw-1",
        ] {
            let why = region_problem(bad).unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(why.contains("is not an AWS region name"), "{why}");
            assert!(why.starts_with(&format!("{bad:?}")), "{why}");
        }
        // A long name is cut at 60 characters in the error.
        let why = region_problem(&"a".repeat(100_000)).unwrap_or_default();
        assert!(
            why.starts_with(&format!("\"{}\" is", "a".repeat(60))),
            "{why}"
        );
    }

    /// A config with `region` at a branch's, `[publish.cloudwatch]`'s, a publish target's,
    /// `[state.s3]`'s and `[evidence.s3]`'s key, and `password` as the database password.
    fn config_with(region: &str, password: &str) -> String {
        format!(
            "[publish]\nsinks = [\"cloudwatch\"]\n[publish.cloudwatch]\nregion = \"{region}\"\n\
             [probe]\nkind = \"postgres\"\n[probe.tls]\nssl_mode = \"verify_identity\"\nssl_ca = \"/ca.pem\"\n\
             [probe.postgres]\nuser = \"probe\"\npassword = {password}\n\
             [service]\nname = \"a\"\nstable_name = \"a.internal.example\"\npublish = {{ region = \"{region}\" }}\n\
             [[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"a1.internal.example\"\nregion = \"{region}\"\n\
             [state]\nstore = \"s3\"\n[state.s3]\nbucket = \"bkt\"\nregion = \"{region}\"\n\
             [evidence.s3]\nbucket = \"bkt\"\nregion = \"{region}\"\n"
        )
    }

    /// The passwords whose reference names `region`: a Secrets Manager one, an RDS IAM token.
    fn passwords(region: &str) -> [String; 2] {
        [
            format!("{{ secrets_manager = \"db\", region = \"{region}\" }}"),
            format!("{{ rds_iam = {{ region = \"{region}\" }} }}"),
        ]
    }

    /// Every key that takes a region follows the one rule: a name one accepts, all accept; a
    /// name one refuses, each refuses on its own key with the same words.
    #[test]
    fn every_region_key_follows_the_one_rule() {
        let path = std::path::Path::new("t.toml");
        let parse = |text: &str| crate::config::parse(path, text).map_err(|e| e.issues);
        let env = "{ env = \"PW\" }";
        for ok in ["us-gov-west-1", "cn-north-1", "eu-central-2"] {
            for password in passwords(ok) {
                let text = config_with(ok, &password);
                assert!(parse(&text).is_ok(), "{ok}: {:?}", parse(&text));
            }
        }
        for bad in ["eu-west", "euwest1", "EU", "eu-west-01", "eu-west-1a"] {
            let mut cases: Vec<(String, &str)> = [
                "publish.cloudwatch.region",
                "service.publish.region",
                "branch[0].region",
                "state.s3.region",
                "evidence.s3.region",
            ]
            .map(|key| (config_with(bad, env), key))
            .into();
            for password in passwords(bad) {
                cases.push((
                    config_with("eu-west-1", &password),
                    "probe.postgres.password",
                ));
            }
            for (text, key) in cases {
                let issues = parse(&text).expect_err(&text);
                let hit = issues.iter().find(|i| i.key == key);
                assert!(
                    hit.is_some_and(|i| i.message.contains("is not an AWS region name")),
                    "{bad:?} at {key}: {issues:?}"
                );
            }
        }
    }

    /// With `endpoint_url` (an S3-compatible store), `[state.s3]` and `[evidence.s3]` take the
    /// store's own region names; without it, AWS names only.
    #[test]
    fn an_s3_compatible_store_takes_its_own_region_names() {
        let path = std::path::Path::new("t.toml");
        let parse = |text: &str| crate::config::parse(path, text).map_err(|e| e.issues);
        let text = |region: &str, endpoint: bool| {
            let url = if endpoint {
                "endpoint_url = \"http://127.0.0.1:3900\"\n"
            } else {
                ""
            };
            format!(
                "[probe]\nkind = \"tcp\"\n\
                 [service]\nname = \"a\"\nstable_name = \"a.internal.example\"\n\
                 [[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"a1.internal.example\"\nport = 5432\n\
                 [state]\nstore = \"s3\"\n[state.s3]\nbucket = \"bkt\"\nregion = \"{region}\"\n{url}\
                 [evidence.s3]\nbucket = \"bkt\"\nregion = \"{region}\"\n{url}"
            )
        };
        for region in ["garage", "default", "us-east-1", "minio-1"] {
            let t = text(region, true);
            assert!(parse(&t).is_ok(), "{region}: {:?}\n{t}", parse(&t));
        }
        for region in ["garage", "default"] {
            let issues = parse(&text(region, false)).expect_err(region);
            for key in ["state.s3.region", "evidence.s3.region"] {
                let hit = issues.iter().find(|i| i.key == key);
                assert!(
                    hit.is_some_and(|i| i.message.contains("is not an AWS region name")),
                    "{region} at {key}: {issues:?}"
                );
            }
        }
        for region in ["Garage", "my_store", "", &"a".repeat(65)] {
            let issues = parse(&text(region, true)).expect_err(region);
            for key in ["state.s3.region", "evidence.s3.region"] {
                let hit = issues.iter().find(|i| i.key == key);
                assert!(
                    hit.is_some_and(|i| i.message.contains("with endpoint_url")),
                    "{region:?} at {key}: {issues:?}"
                );
            }
        }
    }
}
