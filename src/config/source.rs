//! Where a config comes from, as `--config` names it: a local file or an S3 object
//! (`s3://bucket/key`). Pure: naming a source reads nothing; `config_source` reads it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The scheme of a config kept in S3.
const S3_SCHEME: &str = "s3://";

/// A config's source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A local file; relative paths inside it resolve against its directory.
    File(PathBuf),
    /// An S3 object; relative paths inside it resolve against the working directory.
    S3 {
        /// The bucket.
        bucket: String,
        /// The object key.
        key: String,
    },
}

impl ConfigSource {
    /// The name errors and the `start` record give the source: the file's path, or the
    /// `s3://bucket/key` URL.
    pub fn name(&self) -> PathBuf {
        match self {
            ConfigSource::File(p) => p.clone(),
            ConfigSource::S3 { .. } => PathBuf::from(self.to_string()),
        }
    }
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::File(p) => write!(f, "{}", p.display()),
            ConfigSource::S3 { bucket, key } => write!(f, "{S3_SCHEME}{bucket}/{key}"),
        }
    }
}

impl FromStr for ConfigSource {
    type Err = String;

    /// `s3://bucket/key` (a bucket named by S3's rules, [`super::check_bucket`], a key of
    /// 1–1024 bytes), else a file path.
    fn from_str(s: &str) -> Result<Self, String> {
        let Some(rest) = s.strip_prefix(S3_SCHEME) else {
            if s.is_empty() {
                return Err("an empty path".into());
            }
            return Ok(ConfigSource::File(PathBuf::from(s)));
        };
        let Some((bucket, key)) = rest.split_once('/') else {
            return Err(format!("{s:?}: an S3 config is named s3://bucket/key"));
        };
        super::check_bucket(bucket).map_err(|why| format!("{s:?}: the bucket {why}"))?;
        if key.is_empty() || key.len() > 1024 || key.chars().any(char::is_control) {
            return Err(format!(
                "{s:?}: the key must be 1–1024 bytes without control characters"
            ));
        }
        Ok(ConfigSource::S3 {
            bucket: bucket.to_string(),
            key: key.to_string(),
        })
    }
}

/// The directory the relative paths of the config named `name` resolve against: the file's,
/// or, for a config named by an `s3://` URL (no directory of its own), the working directory.
pub(super) fn base_dir(name: &Path) -> &Path {
    if name.to_str().is_some_and(|s| s.starts_with(S3_SCHEME)) {
        Path::new("")
    } else {
        name.parent().unwrap_or(Path::new("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_s3_url_names_a_bucket_and_key_and_anything_else_is_a_file() {
        let s3: ConfigSource = "s3://cfg-bucket/readyprobe/prod.toml".parse().unwrap();
        assert_eq!(
            s3,
            ConfigSource::S3 {
                bucket: "cfg-bucket".into(),
                key: "readyprobe/prod.toml".into()
            }
        );
        assert_eq!(s3.to_string(), "s3://cfg-bucket/readyprobe/prod.toml");
        assert_eq!(
            s3.name(),
            PathBuf::from("s3://cfg-bucket/readyprobe/prod.toml")
        );
        let file: ConfigSource = "etc/readyprobe.toml".parse().unwrap();
        assert_eq!(file, ConfigSource::File("etc/readyprobe.toml".into()));
        for bad in [
            "s3://bucket",
            "s3://bucket/",
            "s3://B/k",
            "s3://ab/k",
            "s3://-cfg/k",
            "s3://cfg./k",
            "",
        ] {
            assert!(bad.parse::<ConfigSource>().is_err(), "{bad}");
        }
    }

    #[test]
    fn relative_paths_of_an_s3_config_resolve_against_the_working_directory() {
        assert_eq!(base_dir(Path::new("s3://b-1/x/y.toml")), Path::new(""));
        assert_eq!(
            base_dir(Path::new("/etc/readyprobe/a.toml")),
            Path::new("/etc/readyprobe")
        );
        assert_eq!(base_dir(Path::new("a.toml")), Path::new(""));
    }
}
