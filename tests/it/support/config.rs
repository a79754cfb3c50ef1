//! The one place integration tests write readyprobe config files: [`ConfigBuilder`] renders TOML
//! from the defaults the tests share plus setters for what a test changes, so a change of the
//! config format touches this file only.

use std::path::{Path, PathBuf};

/// A small valid config as literal text, for tests that edit the bytes themselves (hostile
/// values, fuzzing) rather than build through [`ConfigBuilder`].
pub const BASE_TCP: &str = r#"[service]
name = "orders-db"
stable_name = "mysql.orders.internal.example"

[probe]
kind = "tcp"

[probe.tcp]
port = 3306

[[branch]]
name = "primary"
role = "PRIMARY"
endpoint = "mysql-primary.orders.internal.example"

[[branch]]
name = "secondary"
role = "SECONDARY"
endpoint = "mysql-secondary.orders.internal.example"
"#;

/// A config file under construction: top-level keys, tables in first-use order, and branches.
#[derive(Debug, Clone)]
pub struct ConfigBuilder {
    top: Vec<(String, String)>,
    tables: Vec<(String, Vec<(String, String)>)>,
    branches: Vec<Vec<(String, String)>>,
}

/// A key and its value, as TOML text.
type Entry = (String, String);

/// Set `key` in `entries`, replacing an earlier value.
fn put(entries: &mut Vec<Entry>, key: &str, value: String) {
    match entries.iter_mut().find(|(k, _)| k == key) {
        Some(kv) => kv.1 = value,
        None => entries.push((key.into(), value)),
    }
}

/// `{ file = "PATH" }`, a secret by reference.
pub fn secret_file(path: &Path) -> toml::Value {
    let mut t = toml::Table::new();
    t.insert("file".into(), path.display().to_string().into());
    toml::Value::Table(t)
}

/// `{ env = "VAR" }`, a secret by reference.
pub fn secret_env(var: &str) -> toml::Value {
    let mut t = toml::Table::new();
    t.insert("env".into(), var.into());
    toml::Value::Table(t)
}

/// A path as a TOML string.
pub fn path(p: &Path) -> toml::Value {
    p.display().to_string().into()
}

impl ConfigBuilder {
    /// The defaults the tests share: `prober_id = "it"`, state under `dir`, a 2 s probe with a
    /// 1.5 s timeout, a 30 s window of at least 5 attempts, and service `service` whose stable
    /// name is `stable_name`. Kind, TLS, nameservers and branches are the caller's.
    pub fn new(dir: &Path, service: &str, stable_name: &str) -> Self {
        ConfigBuilder {
            top: Vec::new(),
            tables: Vec::new(),
            branches: Vec::new(),
        }
        .top("prober_id", "it")
        .top("state_dir", path(&dir.join("state")))
        .set("service", "name", service)
        .set("service", "stable_name", stable_name)
        .set("readiness", "window", "30s")
        .set("readiness", "min_attempts", 5)
        .set("probe", "interval", "2s")
        .set("probe", "timeout", "1500ms")
    }

    /// Set a top-level key.
    pub fn top(mut self, key: &str, value: impl Into<toml::Value>) -> Self {
        put(&mut self.top, key, value.into().to_string());
        self
    }

    /// Set `key` in `[table]` (dotted, e.g. `probe.tls`), replacing an earlier value.
    pub fn set(self, table: &str, key: &str, value: impl Into<toml::Value>) -> Self {
        self.set_text(table, key, value.into().to_string())
    }

    /// Set `key` in `[table]` to `value`, TOML text as written (an inline table, say).
    pub fn set_raw(self, table: &str, key: &str, value: &str) -> Self {
        self.set_text(table, key, value.to_string())
    }

    /// Set `key` in `[table]` to a value written as TOML text.
    fn set_text(mut self, table: &str, key: &str, value: String) -> Self {
        let keys = match self.tables.iter_mut().find(|(t, _)| t == table) {
            Some((_, keys)) => keys,
            None => {
                self.tables.push((table.into(), Vec::new()));
                &mut self.tables.last_mut().expect("just pushed").1
            }
        };
        put(keys, key, value);
        self
    }

    /// Remove `key` from `[table]`.
    pub fn unset(mut self, table: &str, key: &str) -> Self {
        if let Some((_, keys)) = self.tables.iter_mut().find(|(t, _)| t == table) {
            keys.retain(|(k, _)| k != key);
        }
        self
    }

    /// Replace the whole `[table]` (its sub-tables stay).
    pub fn clear(mut self, table: &str) -> Self {
        self.tables.retain(|(t, _)| t != table);
        self
    }

    /// Merge a TOML fragment (e.g. a `[readiness]` table): every key of every table it holds is
    /// set, top-level keys too; inline tables stay inline.
    pub fn merge(self, fragment: &str) -> Self {
        let doc: toml_edit::DocumentMut = fragment
            .parse()
            .unwrap_or_else(|e| panic!("fragment {fragment:?}: {e}"));
        self.merge_table("", doc.as_table())
    }

    fn merge_table(mut self, prefix: &str, t: &toml_edit::Table) -> Self {
        for (key, item) in t.iter() {
            match item {
                toml_edit::Item::Table(sub) => {
                    let name = if prefix.is_empty() {
                        key.to_string()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    self = self.merge_table(&name, sub);
                }
                toml_edit::Item::Value(v) => {
                    let text = v.clone().decorated("", "").to_string();
                    if prefix.is_empty() {
                        put(&mut self.top, key, text);
                    } else {
                        self = self.set_text(prefix, key, text);
                    }
                }
                other => panic!("fragment: {key} = {other:?} is not supported"),
            }
        }
        self
    }

    /// `probe.kind`.
    pub fn kind(self, kind: &str) -> Self {
        self.set("probe", "kind", kind)
    }

    /// `[probe.tls]` ssl_mode and, if given, ssl_ca.
    pub fn tls(self, ssl_mode: &str, ssl_ca: Option<&Path>) -> Self {
        let b = self.set("probe.tls", "ssl_mode", ssl_mode);
        match ssl_ca {
            Some(ca) => b.set("probe.tls", "ssl_ca", path(ca)),
            None => b.unset("probe.tls", "ssl_ca"),
        }
    }

    /// A client certificate and key in `[probe.tls]`.
    pub fn client_cert(self, cert: &Path, key: &Path) -> Self {
        self.set("probe.tls", "ssl_cert", path(cert))
            .set("probe.tls", "ssl_key", path(key))
    }

    /// One nameserver in `[dns]`.
    pub fn nameserver(self, addr: impl std::fmt::Display) -> Self {
        self.set(
            "dns",
            "nameservers",
            toml::Value::Array(vec![addr.to_string().into()]),
        )
    }

    /// Append a `[[branch]]`.
    pub fn branch(mut self, name: &str, role: &str, endpoint: &str, port: Option<u16>) -> Self {
        let text = |v: toml::Value| v.to_string();
        let mut b: Vec<Entry> = vec![
            ("name".into(), text(name.into())),
            ("role".into(), text(role.into())),
            ("endpoint".into(), text(endpoint.into())),
        ];
        if let Some(p) = port {
            b.push(("port".into(), text(i64::from(p).into())));
        }
        self.branches.push(b);
        self
    }

    /// Set `key` of the branch named `name`.
    pub fn branch_set(mut self, name: &str, key: &str, value: impl Into<toml::Value>) -> Self {
        let quoted = toml::Value::from(name).to_string();
        let b = self
            .branches
            .iter_mut()
            .find(|b| b.iter().any(|(k, v)| k == "name" && *v == quoted))
            .unwrap_or_else(|| panic!("no branch {name:?}"));
        put(b, key, value.into().to_string());
        self
    }

    /// The TOML text.
    pub fn build(&self) -> String {
        let line = |(k, v): &Entry| format!("{k} = {v}\n");
        let mut s: String = self.top.iter().map(line).collect();
        for (table, keys) in &self.tables {
            s.push_str(&format!("\n[{table}]\n"));
            s.extend(keys.iter().map(line));
        }
        for b in &self.branches {
            s.push_str("\n[[branch]]\n");
            s.extend(b.iter().map(line));
        }
        s
    }

    /// Write the TOML text to `path` and return the path.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, self.build()).unwrap();
        path.to_owned()
    }

    /// Write to `path` and validate.
    pub fn load(&self, path: &Path) -> readyprobe::config::Config {
        readyprobe::config::load(&self.write(path)).unwrap_or_else(|e| panic!("{e}"))
    }
}
