//! Throwaway PostgreSQL 15 clusters for integration tests: `initdb` as the `postgres` user into a
//! temporary directory it owns, its own port on 127.0.0.1, TLS with a test CA's server
//! certificate, `hostssl ... scram-sha-256` (or a method a test asks for), fsync off; stopped
//! (immediate mode) and deleted on drop. A hot standby is made with `pg_basebackup -R` and
//! promoted with `pg_ctl promote`. Administrator statements go through `psql` on the cluster's
//! unix socket (trust), as the `postgres` user.

use std::{
    fs,
    net::{Ipv4Addr, SocketAddr},
    os::unix::fs::{PermissionsExt, chown},
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
};

use tempfile::TempDir;

use super::tls::ServerCert;

/// The probe role `probes/postgres-canary.sql` creates.
pub const CANARY_USER: &str = "readyprobe";
/// The database and table the canary script creates.
pub const CANARY_TABLE: &str = "public.canary";

/// How to start a cluster.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// Serve TLS with this certificate (`ssl = on`).
    pub tls: Option<ServerCert>,
    /// The `pg_hba.conf` method of TCP connections (`scram-sha-256`, `md5`, `password`).
    pub method: String,
    /// `max_connections` (at least 5: 3 are reserved for superusers).
    pub max_connections: u32,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            tls: None,
            method: "scram-sha-256".into(),
            max_connections: 20,
        }
    }
}

/// A throwaway cluster on 127.0.0.1. Dropping it stops it (`pg_ctl stop -m immediate`) and
/// deletes its directory.
pub struct Postgres {
    port: u16,
    dir: TempDir,
    running: bool,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// The server binaries (`pg_config --bindir`, else Debian's path for 15).
fn bindir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let from_config = Command::new("pg_config")
            .arg("--bindir")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
        from_config
            .into_iter()
            .chain([PathBuf::from("/usr/lib/postgresql/15/bin")])
            .find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
    })
    .clone()
}

/// The `postgres` user's uid and gid.
fn postgres_ids() -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let o = Command::new("id").args([flag, "postgres"]).output().ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

/// Why no cluster can be started here, or `Ok`.
pub fn availability() -> Result<(), String> {
    bindir().ok_or("PostgreSQL server binaries not found (apt-get install postgresql-15)")?;
    postgres_ids().ok_or("no `postgres` user to run initdb and pg_ctl as")?;
    Ok(())
}

/// Run a server binary as the `postgres` user; its output, or an error with its stderr.
fn as_postgres(program: &str, args: &[&str]) -> Result<Output, String> {
    let bin = bindir().ok_or("no PostgreSQL binaries")?.join(program);
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(&bin)
        .args(args)
        .current_dir("/")
        .output()
        .map_err(|e| format!("run {}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {args:?}: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out)
}

/// Give `path` to the `postgres` user.
fn give(path: &Path) {
    let (uid, gid) = postgres_ids().expect("postgres user");
    chown(path, Some(uid), Some(gid)).unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
}

impl Postgres {
    /// Starts a primary and waits until it accepts connections; `None` after a loud skip when
    /// PostgreSQL is not installed (a panic under `CI=true`).
    pub async fn start_or_skip(opts: PgOptions) -> Option<Postgres> {
        if let Err(why) = availability() {
            super::skip_or_panic(&format!("PostgreSQL unavailable: {why}"));
            return None;
        }
        Some(
            tokio::task::spawn_blocking(move || Self::start_primary(&opts))
                .await
                .expect("start task")
                .unwrap_or_else(|e| panic!("starting a throwaway PostgreSQL failed: {e}")),
        )
    }

    fn new_dir() -> TempDir {
        let dir = tempfile::Builder::new()
            .prefix("readyprobe-pg-")
            .tempdir()
            .expect("cluster dir");
        give(dir.path());
        dir
    }

    fn start_primary(opts: &PgOptions) -> Result<Postgres, String> {
        let dir = Self::new_dir();
        let data = dir.path().join("data");
        let data_s = data.to_str().expect("utf-8 path");
        as_postgres(
            "initdb",
            &[
                "-D",
                data_s,
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
                "--auth-local=trust",
                "--auth-host=reject",
            ],
        )?;
        let mut pg = Postgres {
            port: 0,
            dir,
            running: false,
        };
        pg.configure(opts)?;
        pg.start_on_a_free_port()?;
        Ok(pg)
    }

    /// Settings, TLS files and `pg_hba.conf` of this cluster's data directory.
    fn configure(&self, opts: &PgOptions) -> Result<(), String> {
        let data = self.data();
        let mut conf = format!(
            "\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n\
             max_connections = {}\nshared_buffers = 16MB\nwal_level = replica\n\
             max_wal_senders = 4\nhot_standby = on\nlog_connections = on\n\
             password_encryption = scram-sha-256\n",
            self.dir.path().display(),
            opts.max_connections,
        );
        if let Some(cert) = &opts.tls {
            for (from, to) in [
                (cert.cert_pem_path(), "server.crt"),
                (cert.key_pem_path(), "server.key"),
            ] {
                let dest = data.join(to);
                fs::copy(from, &dest).map_err(|e| format!("copy {to}: {e}"))?;
                give(&dest);
                fs::set_permissions(&dest, fs::Permissions::from_mode(0o600))
                    .map_err(|e| e.to_string())?;
            }
            conf.push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        }
        append(&data.join("postgresql.conf"), &conf)?;
        let hba = format!(
            "local all all trust\nlocal replication all trust\n\
             hostssl all all 127.0.0.1/32 {m}\nhost all all 127.0.0.1/32 {m}\n",
            m = opts.method
        );
        fs::write(data.join("pg_hba.conf"), hba).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// `pg_ctl start` on a fresh port, a few tries (the port is free only a moment ago).
    fn start_on_a_free_port(&mut self) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..5 {
            self.port = super::free_tcp_port();
            match self.pg_ctl_start() {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
        }
        Err(format!("no start after 5 ports: {last}"))
    }

    fn pg_ctl_start(&mut self) -> Result<(), String> {
        let (data, log) = (self.data(), self.dir.path().join("server.log"));
        let port = format!("-p {}", self.port);
        as_postgres(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-o",
                &port,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )?;
        self.running = true;
        Ok(())
    }

    /// A hot standby of this cluster (`pg_basebackup -R`), started on its own port.
    pub async fn standby(&self) -> Postgres {
        let (socket, port) = (self.dir.path().to_path_buf(), self.port);
        tokio::task::spawn_blocking(move || {
            let dir = Self::new_dir();
            let data = dir.path().join("data");
            as_postgres(
                "pg_basebackup",
                &[
                    "-h",
                    socket.to_str().unwrap(),
                    "-p",
                    &port.to_string(),
                    "-U",
                    "postgres",
                    "-D",
                    data.to_str().unwrap(),
                    "-R",
                    "-X",
                    "stream",
                    "--no-sync",
                ],
            )?;
            let mut pg = Postgres {
                port: 0,
                dir,
                running: false,
            };
            // The copied settings name the primary's socket directory: this one's own.
            append(
                &pg.data().join("postgresql.conf"),
                &format!(
                    "\nunix_socket_directories = '{}'\n",
                    pg.dir.path().display()
                ),
            )?;
            pg.start_on_a_free_port()?;
            Ok::<_, String>(pg)
        })
        .await
        .expect("standby task")
        .unwrap_or_else(|e| panic!("starting a standby failed: {e}"))
    }

    /// `pg_ctl promote` (waits until the standby is a primary).
    pub async fn promote(&self) {
        let data = self.data();
        tokio::task::spawn_blocking(move || {
            as_postgres(
                "pg_ctl",
                &["-D", data.to_str().unwrap(), "-w", "-t", "60", "promote"],
            )
        })
        .await
        .expect("promote task")
        .unwrap_or_else(|e| panic!("promote: {e}"));
    }

    /// `pg_ctl restart` (fast shutdown: sessions are cut), on the same port.
    pub async fn restart(&mut self) {
        let data = self.data();
        let (log, port) = (self.dir.path().join("server.log"), self.port);
        tokio::task::spawn_blocking(move || {
            as_postgres(
                "pg_ctl",
                &[
                    "-D",
                    data.to_str().unwrap(),
                    "-l",
                    log.to_str().unwrap(),
                    "-o",
                    &format!("-p {port}"),
                    "-m",
                    "fast",
                    "-w",
                    "-t",
                    "60",
                    "restart",
                ],
            )
        })
        .await
        .expect("restart task")
        .unwrap_or_else(|e| panic!("restart: {e}"));
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server log (`log_connections` is on).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Run `sql` (a script: several statements, psql's `\connect`) as `postgres` in `db`;
    /// tuples only, unaligned, `|` between fields.
    pub async fn psql(&self, db: &str, sql: &str) -> String {
        self.try_psql(db, sql)
            .await
            .unwrap_or_else(|e| panic!("psql: {e}"))
    }

    /// [`Postgres::psql`], reporting a failed statement as an error.
    pub async fn try_psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let (socket, port) = (self.dir.path().to_path_buf(), self.port.to_string());
        let (db, sql) = (db.to_string(), sql.to_string());
        tokio::task::spawn_blocking(move || {
            let script = socket.join(format!("script-{}.sql", rand_suffix()));
            fs::write(&script, &sql).map_err(|e| e.to_string())?;
            give(&script);
            let out = as_postgres(
                "psql",
                &[
                    "-h",
                    socket.to_str().unwrap(),
                    "-p",
                    &port,
                    "-U",
                    "postgres",
                    "-d",
                    &db,
                    "-X",
                    "-q",
                    "-A",
                    "-t",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-f",
                    script.to_str().unwrap(),
                ],
            );
            let _ = fs::remove_file(&script);
            out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        })
        .await
        .expect("psql task")
    }

    /// Run `probes/postgres-canary.sql` with `password`.
    pub async fn install_canary(&self, password: &str) {
        self.psql("postgres", &canary_sql(password)).await;
    }

    /// `ALTER SYSTEM SET default_transaction_read_only` and a reload.
    pub async fn set_default_read_only(&self, on: bool) {
        self.psql(
            "postgres",
            &format!(
                "ALTER SYSTEM SET default_transaction_read_only = {};\nSELECT pg_reload_conf();",
                if on { "on" } else { "off" }
            ),
        )
        .await;
    }

    /// Connections the server authorised for the probe role so far (`log_connections`).
    pub fn probe_connections(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains("connection authorized: user=readyprobe"))
            .count()
    }

    /// Stop now (`immediate`): what a crash looks like to clients.
    pub fn stop_now(&mut self) {
        if self.running {
            let data = self.data();
            let _ = as_postgres(
                "pg_ctl",
                &[
                    "-D",
                    data.to_str().unwrap(),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
            );
            self.running = false;
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop_now();
    }
}

fn append(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("append to {}: {e}", path.display()))
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    u64::from(std::process::id()) << 20 | N.fetch_add(1, Ordering::Relaxed)
}

/// The canary script of the repo with `@PASSWORD@` replaced (escaped for a '...' literal).
/// Read at run time so edits to the script are always what is tested.
pub fn canary_sql(password: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/postgres-canary.sql");
    let script =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    script.replace("@PASSWORD@", &password.replace('\'', "''"))
}

/// The branch name of the PostgreSQL worlds.
pub const PG_PRIMARY: &str = "pg-primary.orders.internal.example";

/// One PostgreSQL branch's world: a CA, the branch's name in DNS (127.0.0.1), a directory for
/// config, password and evidence, and a cluster serving TLS for the name with the canary
/// installed.
pub struct PgWorld {
    pub ca: super::tls::TestCa,
    pub dns: super::dns::DnsServer,
    pub dir: TempDir,
    pub pg: Postgres,
}

impl PgWorld {
    /// The world with a cluster started with `opts` (its certificate is the world's); `None`
    /// after a loud skip when PostgreSQL is not installed.
    pub async fn start_or_skip(mut opts: PgOptions) -> Option<PgWorld> {
        let ca = super::tls::TestCa::new();
        opts.tls = Some(ca.server_cert(&[PG_PRIMARY], &[Ipv4Addr::LOCALHOST.into()]));
        let pg = Postgres::start_or_skip(opts).await?;
        pg.install_canary(super::fixture::PASSWORD).await;
        let dns = super::dns::DnsServer::start(super::fixture::ZONE).await;
        dns.set_a("pg-primary", Ipv4Addr::LOCALHOST, 5).await;
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("password"),
            format!("{}\n", super::fixture::PASSWORD),
        )
        .unwrap();
        Some(PgWorld { ca, dns, dir, pg })
    }

    pub fn evidence(&self) -> PathBuf {
        self.dir.path().join("evidence.jsonl")
    }

    /// A `postgres` probe of one branch, `primary` at `PG_PRIMARY:port`, TLS verified against
    /// the test CA; `interval_ms` between attempts, `timeout_ms` each.
    pub fn config(
        &self,
        port: u16,
        interval_ms: u64,
        timeout_ms: u64,
    ) -> super::config::ConfigBuilder {
        use super::config::{path, secret_file};
        let dir = self.dir.path();
        super::config::ConfigBuilder::new(dir, "orders-pg", "pg.orders.internal.example")
            .set("publish", "interval", "1s")
            .set("publish", "sinks", toml::Value::Array(vec!["emf".into()]))
            .set("evidence", "path", path(&self.evidence()))
            .nameserver(self.dns.addr())
            .set("dns", "timeout", "300ms")
            .kind("postgres")
            .set("probe", "interval", format!("{interval_ms}ms"))
            .set("probe", "timeout", format!("{timeout_ms}ms"))
            .set("probe", "jitter", "0s")
            .tls("verify_identity", Some(self.ca.ca_pem_path()))
            .set("probe.postgres", "user", CANARY_USER)
            .set(
                "probe.postgres",
                "password",
                secret_file(&dir.join("password")),
            )
            .branch("primary", "PRIMARY", PG_PRIMARY, Some(port))
    }
}
