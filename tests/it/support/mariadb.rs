//! Throwaway MariaDB servers for integration tests: one real `mariadbd` process per instance, its
//! datadir copied from a once-built template, killed and deleted on drop.
//!
//! The template datadir is made by `mariadb-install-db` once per machine and server version under
//! `CARGO_TARGET_TMPDIR` (atomic rename, so parallel tests and test processes don't race), and
//! copied per instance (~22 MB). Root has an empty password; root statements go over the
//! instance's unix socket without TLS.

use std::{
    fs::{self, OpenOptions},
    io::{self, Read, Seek, SeekFrom},
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use mysql_async::{Conn, Opts, OptsBuilder, prelude::*};
use tempfile::TempDir;

use super::tls::ServerCert;

/// The probe identity created by `probes/mysql-canary.sql`.
pub const CANARY_USER: &str = "readyprobe";
/// `ER_OPTION_PREVENTS_STATEMENT`: what a write gets from a `read_only` server.
pub const ER_OPTION_PREVENTS_STATEMENT: u16 = 1290;

/// Bump when the template's install flags change, so stale cached templates are not reused.
const TEMPLATE_REV: &str = "r1";
const TEMPLATE_MARKER: &str = "readyprobe-template.ok";
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// InnoDB settings shared by the template install and every instance (the redo log size must
/// agree, and small files keep each copy cheap).
const INNODB_ARGS: &[&str] = &[
    "--innodb-log-file-size=4M",
    "--innodb-buffer-pool-size=32M",
    "--innodb-use-native-aio=0",
];

/// How to start an instance. `MariaDb::start(tls)` covers the common case.
#[derive(Clone, Debug, Default)]
pub struct MariaDbOptions {
    /// Serve TLS with this certificate (`--ssl-ca/--ssl-cert/--ssl-key`).
    pub tls: Option<ServerCert>,
    /// Extra `mariadbd` arguments, e.g. `--require-secure-transport=ON`.
    pub extra_args: Vec<String>,
}

/// A running (or deliberately stopped/killed) throwaway `mariadbd` on 127.0.0.1.
///
/// Dropping it kills the process (SIGKILL) and removes its directory.
pub struct MariaDb {
    port: u16,
    child: Option<Child>,
    opts: MariaDbOptions,
    // Declared last: removed after the process is gone.
    dir: TempDir,
}

impl std::fmt::Debug for MariaDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MariaDb")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// Why no instance can be started here, or `Ok` when `mariadbd` and `mariadb-install-db` exist.
pub fn availability() -> Result<(), String> {
    mariadbd_path().ok_or_else(|| {
        "`mariadbd` not found in PATH or /usr/sbin (apt-get install mariadb-server)".to_string()
    })?;
    install_db_path().ok_or_else(|| {
        "`mariadb-install-db` not found in PATH or /usr/bin (apt-get install mariadb-server)"
            .to_string()
    })?;
    Ok(())
}

impl MariaDb {
    /// Starts an instance (TLS when `tls` is given) and waits until root can connect.
    /// Panics when MariaDB is not installed or fails to start; see [`MariaDb::start_or_skip`].
    pub async fn start(tls: Option<&ServerCert>) -> MariaDb {
        Self::start_with(MariaDbOptions {
            tls: tls.cloned(),
            ..MariaDbOptions::default()
        })
        .await
    }

    /// Like [`MariaDb::start`], but when MariaDB is not installed: under `CI=true` panics, else
    /// prints a loud `SKIPPED:` line and returns `None` (the test should return early).
    pub async fn start_or_skip(tls: Option<&ServerCert>) -> Option<MariaDb> {
        Self::start_with_or_skip(MariaDbOptions {
            tls: tls.cloned(),
            ..MariaDbOptions::default()
        })
        .await
    }

    /// [`MariaDb::start_or_skip`] with full options.
    pub async fn start_with_or_skip(opts: MariaDbOptions) -> Option<MariaDb> {
        if let Err(why) = availability() {
            super::skip_or_panic(&format!("MariaDB unavailable: {why}"));
            return None;
        }
        Some(Self::start_with(opts).await)
    }

    /// [`MariaDb::start`] with full options.
    pub async fn start_with(opts: MariaDbOptions) -> MariaDb {
        match Self::try_start(opts).await {
            Ok(db) => db,
            Err(e) => panic!("starting a throwaway MariaDB failed: {e}"),
        }
    }

    /// Starts an instance, reporting failure as an error.
    pub async fn try_start(opts: MariaDbOptions) -> Result<MariaDb, String> {
        availability()?;
        // Blocks this thread for ~2.5 s the first time on a machine; later calls are free.
        let template = template_datadir()?;
        let dir = tempfile::Builder::new()
            .prefix("readyprobe-mariadb-")
            .tempdir()
            .map_err(|e| format!("create instance dir: {e}"))?;
        copy_dir(&template, &dir.path().join("data"))
            .map_err(|e| format!("copy template datadir {}: {e}", template.display()))?;
        let _ = fs::remove_file(dir.path().join("data").join(TEMPLATE_MARKER));
        let mut db = MariaDb {
            port: 0,
            child: None,
            opts,
            dir,
        };
        let mut last = String::new();
        for _ in 0..5 {
            db.port = super::free_tcp_port();
            match db.spawn_and_wait().await {
                Ok(()) => return Ok(db),
                Err(SpawnError::PortInUse(log)) => last = log,
                Err(SpawnError::Other(e)) => return Err(e),
            }
        }
        Err(format!("no free port after 5 attempts; last log:\n{last}"))
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The unix socket path.
    pub fn socket_path(&self) -> PathBuf {
        self.dir.path().join("mariadbd.sock")
    }

    /// The data directory of this instance.
    pub fn datadir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still alive (a frozen one counts as running).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                false
            }
            None => false,
        }
    }

    /// The TLS certificate this instance serves, if any.
    pub fn tls(&self) -> Option<&ServerCert> {
        self.opts.tls.as_ref()
    }

    /// Everything `mariadbd` wrote to stdout/stderr so far (all starts of this instance).
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Client options for `user` over TCP to 127.0.0.1:port, without TLS, with
    /// `prefer_socket(false)` (mysql_async would otherwise silently reconnect over the unix
    /// socket it learns from `@@socket`, since the server is local).
    pub fn client_opts(&self, user: &str, password: &str) -> OptsBuilder {
        OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(self.port)
            .user(Some(user))
            .pass(Some(password))
            .prefer_socket(false)
    }

    /// A root connection over the unix socket (no TLS, no password).
    pub async fn root_conn(&self) -> Result<Conn, mysql_async::Error> {
        let socket = self.socket_path().to_string_lossy().into_owned();
        let opts: Opts = OptsBuilder::default()
            .socket(Some(socket))
            .user(Some("root"))
            .into();
        match tokio::time::timeout(Duration::from_secs(5), Conn::new(opts)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "root connect timed out").into()),
        }
    }

    /// Runs `sql` (one statement, or several if the server allows) as root.
    pub async fn try_root_exec(&self, sql: &str) -> Result<(), mysql_async::Error> {
        let mut conn = self.root_conn().await?;
        let result = conn.query_drop(sql).await;
        let _ = conn.disconnect().await;
        result
    }

    /// Runs `sql` as root; panics on error.
    pub async fn root_exec(&self, sql: &str) {
        if let Err(e) = self.try_root_exec(sql).await {
            panic!("root_exec({sql:?}) on port {}: {e}", self.port);
        }
    }

    /// Runs a query as root and collects its rows; panics on error.
    pub async fn root_query<T: FromRow + Send + 'static>(&self, sql: &str) -> Vec<T> {
        let run = async {
            let mut conn = self.root_conn().await?;
            let rows = conn.query(sql).await;
            let _ = conn.disconnect().await;
            rows
        };
        run.await
            .unwrap_or_else(|e| panic!("root_query({sql:?}) on port {}: {e}", self.port))
    }

    /// `SET GLOBAL read_only`. Privileged users (root) bypass it; the canary user does not.
    pub async fn set_read_only(&self, on: bool) {
        self.root_exec(&format!(
            "SET GLOBAL read_only = {}",
            if on { "ON" } else { "OFF" }
        ))
        .await;
    }

    /// Runs the repo's `probes/mysql-canary.sql` as root with `@PASSWORD@` replaced by
    /// `password`, creating `readyprobe.canary` and the `readyprobe` user.
    pub async fn install_canary(&self, password: &str) {
        let script = canary_sql(password);
        let mut conn = self
            .root_conn()
            .await
            .unwrap_or_else(|e| panic!("install_canary: root connect: {e}"));
        for stmt in split_sql_script(&script) {
            if let Err(e) = conn.query_drop(&stmt).await {
                panic!("install_canary: {stmt:?} failed: {e}");
            }
        }
        let _ = conn.disconnect().await;
    }

    /// Graceful shutdown (SIGTERM, then SIGKILL after 30 s). The port and datadir are kept for
    /// [`MariaDb::restart`]. No-op when not running.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id();
        let _ = signal(pid, "TERM");
        let _ = signal(pid, "CONT"); // in case it was frozen
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() >= deadline => break,
                Ok(None) => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Abrupt death (SIGKILL): open connections see resets, new ones are refused. No-op when
    /// not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the process (SIGSTOP): the kernel still completes TCP handshakes into the listen
    /// backlog, but nothing answers — the "hung peer" case. Undo with [`MariaDb::thaw`].
    pub fn freeze(&self) {
        if let Some(pid) = self.pid() {
            signal(pid, "STOP").unwrap_or_else(|e| panic!("SIGSTOP {pid}: {e}"));
        }
    }

    /// Resumes a frozen process (SIGCONT).
    pub fn thaw(&self) {
        if let Some(pid) = self.pid() {
            signal(pid, "CONT").unwrap_or_else(|e| panic!("SIGCONT {pid}: {e}"));
        }
    }

    /// Stops (if running) and starts again on the same port with the same data.
    pub async fn restart(&mut self) {
        self.stop().await;
        if let Err(e) = self.spawn_and_wait().await {
            panic!("restarting MariaDB on port {} failed: {e:?}", self.port);
        }
    }

    /// Like [`MariaDb::restart`], serving a different certificate (or none) from now on.
    pub async fn restart_with_tls(&mut self, tls: Option<&ServerCert>) {
        self.stop().await;
        self.opts.tls = tls.cloned();
        if let Err(e) = self.spawn_and_wait().await {
            panic!("restarting MariaDB on port {} failed: {e:?}", self.port);
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("mariadbd.log")
    }

    async fn spawn_and_wait(&mut self) -> Result<(), SpawnError> {
        let mariadbd = mariadbd_path().ok_or_else(|| SpawnError::Other("no mariadbd".into()))?;
        let log_path = self.log_path();
        let log_offset = fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| SpawnError::Other(format!("open {}: {e}", log_path.display())))?;
        let log2 = log
            .try_clone()
            .map_err(|e| SpawnError::Other(format!("dup log fd: {e}")))?;
        let dir = self.dir.path();

        let mut cmd = Command::new(mariadbd);
        cmd.arg("--no-defaults") // must come first
            .args(user_args())
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.socket_path().display()))
            .arg(format!("--pid-file={}", dir.join("mariadbd.pid").display()))
            .arg(format!("--tmpdir={}", std::env::temp_dir().display()))
            .arg("--skip-log-bin")
            .arg("--skip-name-resolve")
            .arg("--performance-schema=OFF")
            .arg("--max-connections=200")
            .args(INNODB_ARGS);
        if let Some(tls) = &self.opts.tls {
            cmd.arg(format!("--ssl-ca={}", tls.ca_pem_path().display()))
                .arg(format!("--ssl-cert={}", tls.cert_pem_path().display()))
                .arg(format!("--ssl-key={}", tls.key_pem_path().display()));
        }
        cmd.args(&self.opts.extra_args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        let child = cmd
            .spawn()
            .map_err(|e| SpawnError::Other(format!("spawn mariadbd: {e}")))?;
        self.child = Some(child);

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = match self.child.as_mut().map(Child::try_wait) {
                Some(Ok(None)) => None,
                Some(Ok(Some(status))) => Some(status.to_string()),
                Some(Err(e)) => Some(format!("unknown status ({e})")),
                None => Some("gone".to_string()),
            };
            if let Some(status) = exited {
                self.child = None;
                let log = read_from(&log_path, log_offset);
                return Err(
                    if log.contains("Address already in use") || log.contains("Bind on TCP/IP") {
                        SpawnError::PortInUse(log)
                    } else {
                        SpawnError::Other(format!(
                            "mariadbd exited ({status}) during startup; its log:\n{log}"
                        ))
                    },
                );
            }
            if let Ok(conn) = self.root_conn().await {
                let _ = conn.disconnect().await;
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(SpawnError::Other(format!(
                    "mariadbd not ready after {READY_TIMEOUT:?}; its log:\n{}",
                    read_from(&log_path, log_offset)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Debug)]
enum SpawnError {
    PortInUse(String),
    Other(String),
}

/// The canary script of the repo with `@PASSWORD@` replaced (escaped for a '...' literal).
/// Read at run time so concurrent edits to the script are always what is tested.
pub fn canary_sql(password: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/mysql-canary.sql");
    let script =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let escaped = password.replace('\\', "\\\\").replace('\'', "''");
    script.replace("@PASSWORD@", &escaped)
}

/// Splits a SQL script into statements on `;`, dropping `-- `, `#` and `/* */` comments and
/// respecting '...', "..." and `...` quoting (with doubled-quote and backslash escapes).
/// Statements are trimmed; empty ones are dropped. No `DELIMITER` support.
pub fn split_sql_script(script: &str) -> Vec<String> {
    let chars: Vec<char> = script.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut i = 0;
    let flush = |cur: &mut String, out: &mut Vec<String>| {
        let stmt = cur.trim();
        if !stmt.is_empty() {
            out.push(stmt.to_string());
        }
        cur.clear();
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\'' | '"' | '`' => {
                cur.push(c);
                i += 1;
                while i < chars.len() {
                    let d = chars[i];
                    cur.push(d);
                    i += 1;
                    if d == '\\' && c != '`' {
                        if let Some(&e) = chars.get(i) {
                            cur.push(e);
                            i += 1;
                        }
                    } else if d == c {
                        if chars.get(i) == Some(&c) {
                            cur.push(c);
                            i += 1;
                        } else {
                            break;
                        }
                    }
                }
            }
            '-' if next == Some('-') && chars.get(i + 2).is_none_or(|ch| ch.is_whitespace()) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                i += 2;
                while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                    i += 1;
                }
                i += 2;
                cur.push(' ');
            }
            ';' => {
                flush(&mut cur, &mut out);
                i += 1;
            }
            _ => {
                cur.push(c);
                i += 1;
            }
        }
    }
    flush(&mut cur, &mut out);
    out
}

fn find_binary(name: &str, extra_dirs: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra_dirs.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn mariadbd_path() -> Option<PathBuf> {
    find_binary(
        "mariadbd",
        &["/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"],
    )
}

fn install_db_path() -> Option<PathBuf> {
    find_binary(
        "mariadb-install-db",
        &["/usr/bin", "/usr/local/bin", "/usr/local/mysql/scripts"],
    )
}

/// `--user=root` when running as root (mariadbd refuses to run as root without it).
fn user_args() -> Vec<&'static str> {
    let euid_is_root = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if euid_is_root {
        vec!["--user=root"]
    } else {
        vec![]
    }
}

/// The template datadir, built once per machine and server version.
fn template_datadir() -> Result<PathBuf, String> {
    static TEMPLATE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    TEMPLATE.get_or_init(build_template).clone()
}

fn build_template() -> Result<PathBuf, String> {
    let mariadbd = mariadbd_path().ok_or("mariadbd not found")?;
    let install_db = install_db_path().ok_or("mariadb-install-db not found")?;
    let version = Command::new(&mariadbd)
        .arg("--version")
        .output()
        .map_err(|e| format!("{} --version: {e}", mariadbd.display()))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    // "/usr/sbin/mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu ..." → the version.
    let short = version
        .split_once(" Ver ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or(&version);
    let tag: String = short
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readyprobe-mariadb-template");
    let final_dir = root.join(format!("{TEMPLATE_REV}-{tag}"));
    if final_dir.join(TEMPLATE_MARKER).is_file() {
        return Ok(final_dir);
    }
    fs::create_dir_all(&root).map_err(|e| format!("create {}: {e}", root.display()))?;
    let staging = tempfile::Builder::new()
        .prefix("staging-")
        .tempdir_in(&root)
        .map_err(|e| format!("create staging dir in {}: {e}", root.display()))?;
    let datadir = staging.path().join("data");
    let out = Command::new(&install_db)
        .arg("--no-defaults")
        .args(user_args())
        .arg(format!("--datadir={}", datadir.display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .args(INNODB_ARGS)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run {}: {e}", install_db.display()))?;
    if !out.status.success() {
        return Err(format!(
            "mariadb-install-db failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    fs::write(datadir.join(TEMPLATE_MARKER), &version)
        .map_err(|e| format!("write template marker: {e}"))?;
    match fs::rename(&datadir, &final_dir) {
        Ok(()) => Ok(final_dir),
        // Another test process won the race.
        Err(_) if final_dir.join(TEMPLATE_MARKER).is_file() => Ok(final_dir),
        Err(e) => Err(format!(
            "move template into {} failed: {e} (delete that directory if it is stale)",
            final_dir.display()
        )),
    }
}

fn copy_dir(src: &Path, dst: &Path) -> io::Result<()> {
    fs::create_dir_all(dst)?;
    for entry in fs::read_dir(src)? {
        let entry = entry?;
        let to = dst.join(entry.file_name());
        let ty = entry.file_type()?;
        if ty.is_dir() {
            copy_dir(&entry.path(), &to)?;
        } else if ty.is_file() {
            fs::copy(entry.path(), to)?;
        }
    }
    Ok(())
}

fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut f) = fs::File::open(path)
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = f.read_to_string(&mut text);
    }
    text
}

fn signal(pid: u32, sig: &str) -> io::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("kill -{sig} {pid}: {status}")))
    }
}
