//! Secrets by reference: `{ env = "VAR" }` or `{ file = "/run/secrets/x" }`, never inline.
//!
//! Parsing refuses an inline value without echoing it. Reading a secret is the probe's start-up
//! business ([`SecretRef::resolve`]); validation never reads one.

use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// A secret given by reference; the value itself never appears in config, logs or evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretRef {
    /// Read from an environment variable (e.g. injected by ECS `secrets`).
    Env(String),
    /// Read from a file; one trailing newline is stripped. Relative paths are resolved against
    /// the config file's directory by validation.
    File(PathBuf),
}

/// The one shape a reference is written in.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RefTable {
    env: Option<String>,
    file: Option<PathBuf>,
}

impl RefTable {
    fn into_ref(self) -> Option<SecretRef> {
        match (self.env, self.file) {
            (Some(v), None) if !v.is_empty() => Some(SecretRef::Env(v)),
            (None, Some(f)) if !f.as_os_str().is_empty() => Some(SecretRef::File(f)),
            _ => None,
        }
    }
}

const REF_SHAPE: &str = "give exactly one reference: { env = \"VAR\" } or { file = \"/run/secrets/x\" } (secrets are never written inline; the value is not shown)";

impl<'de> Deserialize<'de> for SecretRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// A reference, or anything else: an inline value is refused without being echoed.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Any {
            Ref(RefTable),
            Inline(serde::de::IgnoredAny),
        }
        match Any::deserialize(d)? {
            Any::Ref(r) => r.into_ref(),
            Any::Inline(_) => None,
        }
        .ok_or_else(|| serde::de::Error::custom(REF_SHAPE))
    }
}

impl SecretRef {
    /// The same reference with a relative file path resolved against `base`.
    pub(super) fn relative_to(self, base: &Path) -> Self {
        match self {
            SecretRef::File(p) if p.is_relative() => SecretRef::File(base.join(p)),
            other => other,
        }
    }

    /// Read the secret.
    ///
    /// # Errors
    /// [`SecretError`] naming the variable or file when it is unset, unreadable or empty.
    pub fn resolve(&self) -> Result<String, SecretError> {
        let value = match self {
            SecretRef::Env(var) => std::env::var(var).map_err(|_| SecretError {
                reference: self.to_string(),
                reason: "the environment variable is not set (or not valid UTF-8)".into(),
            })?,
            SecretRef::File(path) => {
                let bytes = std::fs::read(path).map_err(|e| SecretError {
                    reference: self.to_string(),
                    reason: e.to_string(),
                })?;
                return self.value_of_file_contents(bytes);
            }
        };
        self.checked(value)
    }

    /// The secret held by `bytes`, the file's contents read by the caller: one trailing newline
    /// (`\n` or `\r\n`) is not part of it.
    ///
    /// # Errors
    /// [`SecretError`] when the contents are not UTF-8 or the secret is empty.
    pub fn value_of_file_contents(&self, bytes: Vec<u8>) -> Result<String, SecretError> {
        let mut v = String::from_utf8(bytes).map_err(|_| SecretError {
            reference: self.to_string(),
            reason: "stream did not contain valid UTF-8".into(),
        })?;
        if v.ends_with('\n') {
            v.pop();
            if v.ends_with('\r') {
                v.pop();
            }
        }
        self.checked(v)
    }

    fn checked(&self, value: String) -> Result<String, SecretError> {
        if value.is_empty() {
            return Err(SecretError {
                reference: self.to_string(),
                reason: "the secret is empty".into(),
            });
        }
        Ok(value)
    }
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretRef::Env(v) => write!(f, "environment variable {v}"),
            SecretRef::File(p) => write!(f, "file {}", p.display()),
        }
    }
}

/// A secret could not be read.
#[derive(Debug, thiserror::Error)]
#[error("secret from {reference} is unavailable: {reason}")]
pub struct SecretError {
    /// Which reference (never the value).
    pub reference: String,
    /// Why.
    pub reason: String,
}

/// A header value: literal, or a secret by reference (never logged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValueSource {
    /// Literal text (may contain `{{...}}` template variables).
    Plain(String),
    /// Read at start-up.
    Secret(SecretRef),
}

impl<'de> Deserialize<'de> for HeaderValueSource {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Any {
            Plain(String),
            Ref(RefTable),
            Other(serde::de::IgnoredAny),
        }
        match Any::deserialize(d)? {
            Any::Plain(p) => Some(HeaderValueSource::Plain(p)),
            Any::Ref(r) => r.into_ref().map(HeaderValueSource::Secret),
            Any::Other(_) => None,
        }
        .ok_or_else(|| {
            serde::de::Error::custom(
                "a header value is a string, or a secret by reference: { env = \"VAR\" } or { file = \"/path\" }",
            )
        })
    }
}
