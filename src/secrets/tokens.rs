//! RDS IAM tokens as secret cells: one per region, endpoint, port and database user the config
//! names (`password = { rds_iam = … }`; the region is the branch's, else `rds_iam.region`),
//! signed at start-up (and when a reload names a new one) and again every [`RESIGN`], well
//! within the token's 15 minutes. A failed re-signing keeps the last token and is tried again
//! after [`RETRY`]; a token that could not be signed at all leaves its service unavailable
//! until a reload signs it. A token is never logged.

use super::SecretCell;
use crate::aws::rds_token::{Signer, TokenFor};
use crate::config::{Config, SecretRef};
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// How long a token is used before it is signed again (it is valid for 15 minutes: an attempt
/// that starts just before a re-signing still sends a token with 5 minutes left).
pub const RESIGN: Duration = Duration::from_secs(10 * 60);
/// The wait after a failed signing before the next try.
pub const RETRY: Duration = Duration::from_secs(30);

/// A token's cell once signed, else why it could not be.
struct Entry {
    cell: Option<SecretCell>,
    error: Option<String>,
    /// When it is signed again.
    due: Instant,
}

/// The run's RDS IAM tokens.
#[derive(Default)]
pub(super) struct Tokens {
    entries: Mutex<BTreeMap<TokenFor, Entry>>,
    /// One signer (the default chain's credentials) per region.
    signers: tokio::sync::Mutex<BTreeMap<String, Signer>>,
}

/// Every token `cfg` needs, each once: one per branch of a service whose database password is
/// `rds_iam` (host: the branch endpoint; port: the branch's; region: `Branch::token_region`).
pub fn wanted(cfg: &Config) -> Vec<TokenFor> {
    let mut out = Vec::new();
    for svc in &cfg.services {
        let Some((user, SecretRef::RdsIam { region })) = svc.probe.kind.database_login() else {
            continue;
        };
        for b in &svc.branches {
            // Config refuses a branch with no region to sign for.
            if let Some(region) = b.token_region(region.as_deref()) {
                out.push(token_for(region, &b.endpoint, b.port, user));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// What a branch's token is for.
pub fn token_for(region: &str, host: &str, port: u16, user: &str) -> TokenFor {
    TokenFor {
        region: region.to_string(),
        host: host.to_string(),
        port,
        user: user.to_string(),
    }
}

impl Tokens {
    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<TokenFor, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sign every token `cfg` needs that is not held yet (or could not be signed before).
    pub(super) async fn sign_missing(&self, cfg: &Config) {
        let missing: Vec<TokenFor> = {
            let entries = self.entries();
            wanted(cfg)
                .into_iter()
                .filter(|t| entries.get(t).is_none_or(|e| e.cell.is_none()))
                .collect()
        };
        for what in missing {
            let signed = self.sign(&what).await;
            let now = Instant::now();
            let entry = match signed {
                Ok(token) => Entry {
                    cell: Some(SecretCell::with(token, None)),
                    error: None,
                    due: now + RESIGN,
                },
                Err(e) => Entry {
                    cell: None,
                    error: Some(format!("is unavailable: {e}")),
                    due: now + RETRY,
                },
            };
            self.entries().insert(what, entry);
        }
    }

    /// Forget the tokens `cfg` no longer needs.
    pub(super) fn retain(&self, cfg: &Config) {
        let named = wanted(cfg);
        self.entries().retain(|t, _| named.contains(t));
    }

    /// The cell of `what`, or why it is unavailable (never a token).
    pub(super) fn cell(&self, what: &TokenFor) -> Result<SecretCell, String> {
        match self.entries().get(what) {
            Some(Entry { cell: Some(c), .. }) => Ok(c.clone()),
            Some(Entry { error: Some(e), .. }) => Err(e.clone()),
            _ => Err("is unavailable: it was not signed".into()),
        }
    }

    /// Sign `region`'s tokens with `signer` instead of the default chain's credentials.
    pub(super) async fn set_signer(&self, region: &str, signer: Signer) {
        self.signers.lock().await.insert(region.to_string(), signer);
    }

    /// A token for `what` signed now with the region's credentials.
    async fn sign(&self, what: &TokenFor) -> Result<String, String> {
        let signer = {
            let mut signers = self.signers.lock().await;
            match signers.get(&what.region) {
                Some(s) => s.clone(),
                None => {
                    let s = Signer::new(&what.region).await?;
                    signers.insert(what.region.clone(), s.clone());
                    s
                }
            }
        };
        signer.token(what).await
    }

    /// When the next signing is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.entries()
            .values()
            .filter(|e| e.cell.is_some())
            .map(|e| e.due)
            .min()
    }

    /// Sign again each held token that is due at `now`; a failure keeps the last token.
    pub(super) async fn resign_due(&self, now: Instant) {
        let due: Vec<TokenFor> = self
            .entries()
            .iter()
            .filter(|(_, e)| e.cell.is_some() && e.due <= now)
            .map(|(t, _)| t.clone())
            .collect();
        for what in due {
            let signed = self.sign(&what).await;
            let mut entries = self.entries();
            let Some(entry) = entries.get_mut(&what) else {
                continue;
            };
            match (signed, &entry.cell) {
                (Ok(token), Some(cell)) => {
                    cell.set(token);
                    entry.due = Instant::now() + RESIGN;
                    tracing::debug!(token = %what, "RDS IAM token signed again");
                }
                (Err(e), _) => {
                    entry.due = Instant::now() + RETRY;
                    tracing::warn!(
                        token = %what,
                        "RDS IAM token not signed again ({e}); the last one is kept, retried in {}s",
                        RETRY.as_secs()
                    );
                }
                (Ok(_), None) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cross-region service: the primary takes `rds_iam.region`, the secondary names its own;
    /// each branch's cell holds a token signed for its region (the SigV4 credential scope).
    #[tokio::test]
    async fn each_branch_token_cell_is_signed_for_its_region() {
        let text = "[service]\nname = \"orders-db\"\nstable_name = \"db.orders.internal.example\"\n[probe]\nkind = \"mysql\"\n[probe.tls]\nssl_ca = \"/etc/ca.pem\"\n[probe.mysql]\nuser = \"probe\"\npassword = { rds_iam = { region = \"eu-west-1\" } }\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"a.internal.example\"\n[[branch]]\nname = \"secondary\"\nrole = \"SECONDARY\"\nendpoint = \"b.internal.example\"\nregion = \"us-east-1\"\n";
        let cfg = crate::config::parse(std::path::Path::new("/etc/db.toml"), text)
            .unwrap_or_else(|e| panic!("{e}"));
        let (a, b) = (
            token_for("eu-west-1", "a.internal.example", 3306, "probe"),
            token_for("us-east-1", "b.internal.example", 3306, "probe"),
        );
        assert_eq!(wanted(&cfg), [a.clone(), b.clone()]);
        let tokens = Tokens::default();
        for region in ["eu-west-1", "us-east-1"] {
            let creds =
                aws_credential_types::Credentials::new("AKIDTEST", "secret", None, None, "t");
            tokens.set_signer(region, Signer::fixed(creds)).await;
        }
        tokens.sign_missing(&cfg).await;
        for (what, scope) in [
            (&a, "%2Feu-west-1%2Frds-db%2F"),
            (&b, "%2Fus-east-1%2Frds-db%2F"),
        ] {
            let token = tokens
                .cell(what)
                .unwrap_or_else(|e| panic!("{what}: {e}"))
                .get();
            assert!(
                token.starts_with(&format!("{}:3306/", what.host)),
                "{token}"
            );
            assert!(token.contains(scope), "{what}: {token}");
        }
        let wrong = token_for("eu-west-1", "b.internal.example", 3306, "probe");
        assert!(tokens.cell(&wrong).is_err());
    }

    /// One token per branch endpoint and port, for the kind's user; other kinds need none.
    #[test]
    fn each_branch_of_an_rds_iam_service_wants_its_own_token() {
        let text = "[service]\nname = \"orders-db\"\nstable_name = \"db.orders.internal.example\"\n[probe]\nkind = \"mysql\"\n[probe.tls]\nssl_ca = \"/etc/ca.pem\"\n[probe.mysql]\nuser = \"probe\"\npassword = { rds_iam = { region = \"eu-west-1\" } }\n[[branch]]\nname = \"primary\"\nrole = \"PRIMARY\"\nendpoint = \"a.internal.example\"\n[[branch]]\nname = \"secondary\"\nrole = \"SECONDARY\"\nendpoint = \"b.internal.example\"\nport = 3307\n";
        let cfg = crate::config::parse(std::path::Path::new("/etc/db.toml"), text)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            wanted(&cfg),
            [
                token_for("eu-west-1", "a.internal.example", 3306, "probe"),
                token_for("eu-west-1", "b.internal.example", 3307, "probe"),
            ]
        );
        let tokens = Tokens::default();
        let what = token_for("eu-west-1", "a.internal.example", 3306, "probe");
        assert!(tokens.cell(&what).is_err());
        tokens.entries().insert(
            what.clone(),
            Entry {
                cell: Some(SecretCell::with("tok".into(), None)),
                error: None,
                due: Instant::now(),
            },
        );
        assert_eq!(&*tokens.cell(&what).unwrap().get(), "tok");
        let other = crate::config::parse(
            std::path::Path::new("/etc/db.toml"),
            &text.replace("a.internal", "c.internal"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        tokens.retain(&other);
        assert!(tokens.cell(&what).is_err());
    }
}
