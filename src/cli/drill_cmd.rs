//! `drill mark`: an operator's marker in a drill's timeline. Through the state store (every
//! running prober records it into its own evidence at its next sync), or appended directly to
//! one evidence file (`--evidence`, e.g. a copy on a laptop). No probe, no secret, no publish.
//!
//! `drill report`: the evidence files of one or more probers merged into `report.md` and
//! `report.html` ([`crate::report`]); needs no config.

use super::{EXIT_INVALID_CONFIG, EXIT_IO, EXIT_OK};
use crate::config::{Config, ConfigSource, ServiceConfig};
use crate::control::{Marker, MarkerKind};
use crate::record::{Envelope, LineError, LineErrorReason, MarkerRecord, Record, read_lines};
use crate::report::merge::Merger;
use crate::report::model::Drill;
use crate::report::{html, markdown};
use clap::{Args, Subcommand, ValueEnum};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Longest label, characters: one line of a timeline.
pub const MAX_LABEL_CHARS: usize = crate::control::MAX_LABEL_CHARS;

/// `drill` subcommands.
#[derive(Debug, Subcommand)]
pub enum DrillCommand {
    /// Mark what the operator did (a fault injected, restored, a note) in the drill's evidence.
    ///
    /// Without `--evidence` the marker goes into the service's state store: every running prober
    /// records it once, as a `marker` record in its own evidence, at its next sync (within
    /// `state.poll_interval`); a prober that has not recorded it within an hour of it being
    /// given (stopped, or a new prober id) leaves it out. With `--evidence FILE` one `marker`
    /// line is appended to that existing evidence file instead (one whole line in one write;
    /// a symbolic link is refused), and the store is not touched. Exit 0 when recorded, 64
    /// invalid config or arguments (an empty or overlong label, a control
    /// character in the label or `--by`), 74 the state store or the evidence file cannot be
    /// written.
    Mark {
        /// Config: a TOML file, or an S3 object `s3://bucket/key`.
        #[arg(long, short, env = "READYPROBE_CONFIG")]
        config: crate::config::ConfigSource,
        /// What happened, one line of 1 to 200 characters (e.g. "blocked writer path").
        #[arg(long)]
        label: String,
        /// What the marker marks.
        #[arg(long, value_enum, default_value_t = MarkKindArg::Note)]
        kind: MarkKindArg,
        /// Who (default: $USER, else "unknown").
        #[arg(long)]
        by: Option<String>,
        /// Service name; required when the config has several services.
        #[arg(long, short = 's')]
        service: Option<String>,
        /// Append the marker to this evidence file directly instead of the state store.
        #[arg(long)]
        evidence: Option<PathBuf>,
    },
    /// Merge the evidence of one or more probers into a drill report: `report.md`, a
    /// self-contained `report.html` and `report.json` (for scripts) in `--out`, and the phase
    /// tables on stdout.
    ///
    /// Needs no config (copies of the evidence files are enough, or the `[evidence.s3]`
    /// segments at `s3://bucket/prefix/`, within `--from`/`--to`, with progress on stderr). Records are merged by time; a
    /// record given twice (the same file twice, overlapping copies) counts once. Lines that
    /// cannot be used are listed as problems, with each gap in a prober's `record_seq`.
    /// `--alarms` reads CloudWatch through the default AWS chain (`AWS_REGION`,
    /// `AWS_ENDPOINT_URL`, profile or role), or with `--config` through each service's publish
    /// targets (region, role, endpoint): the alarms on each branch's `Readiness` metric in the
    /// namespace the evidence's `start` records name, at most 60 s per service and target. Exit 0 when
    /// written (also when some lines were bad), 64 invalid arguments or nothing to report (no
    /// evidence record at all, or none of `--service`),
    /// 74 an evidence file cannot be read, `--out` cannot be written, or `--alarms` could not
    /// read CloudWatch (the report is written without those lanes, the failure listed).
    Report(ReportArgs),
}

impl DrillCommand {
    /// The config file the subcommand reads; `None` for `report`, which reads none.
    pub(super) fn config(&self) -> Option<&crate::config::ConfigSource> {
        match self {
            DrillCommand::Mark { config, .. } => Some(config),
            DrillCommand::Report(_) => None,
        }
    }
}

/// `--kind` values.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum MarkKindArg {
    /// A fault was injected.
    Fault,
    /// The fault was removed.
    Restore,
    /// Anything else.
    Note,
}

impl From<MarkKindArg> for MarkerKind {
    fn from(k: MarkKindArg) -> Self {
        match k {
            MarkKindArg::Fault => MarkerKind::Fault,
            MarkKindArg::Restore => MarkerKind::Restore,
            MarkKindArg::Note => MarkerKind::Note,
        }
    }
}

/// Why a label or `--by` cannot be a marker's, if it cannot (pure).
pub fn check_mark(label: &str, by: &str) -> Result<(), String> {
    if label.trim().is_empty() || by.trim().is_empty() {
        return Err("--label and --by must not be empty (they are the marker's record)".into());
    }
    let n = label.chars().count();
    if n > MAX_LABEL_CHARS {
        return Err(format!(
            "--label has {n} characters; at most {MAX_LABEL_CHARS} (one line of a timeline)"
        ));
    }
    super::operator::check_length("--by", by, crate::control::MAX_BY_CHARS)?;
    if label.chars().chain(by.chars()).any(char::is_control) {
        return Err(
            "--label and --by must not contain control characters (newlines, escapes)".into(),
        );
    }
    Ok(())
}

/// Run `drill` subcommand `cmd` on service `svc`.
pub(super) async fn drill(cfg: &Config, svc: &ServiceConfig, cmd: DrillCommand) -> ExitCode {
    let (label, kind, by, evidence) = match cmd {
        DrillCommand::Mark {
            label,
            kind,
            by,
            evidence,
            ..
        } => (label, kind, by, evidence),
        DrillCommand::Report(a) => return report(a).await,
    };
    let by = by
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".into());
    if let Err(e) = check_mark(&label, &by) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_INVALID_CONFIG);
    }
    let now = crate::clock::Clock::start().now_ms();
    let marker = Marker {
        id: format!("{now}-{:08x}", rand::random::<u32>()),
        kind: kind.into(),
        label,
        by,
        at: now,
        taken: Default::default(),
    };
    match evidence {
        Some(path) => to_evidence(cfg, svc, &path, marker),
        None => to_store(cfg, svc, marker).await,
    }
}

/// Append the marker to the service's control document.
async fn to_store(cfg: &Config, svc: &ServiceConfig, marker: Marker) -> ExitCode {
    let store = crate::runner::open_store(cfg, &svc.service.name).await;
    let m = marker.clone();
    let doc = match store
        .update(move |doc| {
            doc.markers.push(m.clone());
            Ok(())
        })
        .await
    {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {}", crate::config::escape_controls(&e.to_string()));
            return ExitCode::from(EXIT_IO);
        }
    };
    let fresh = doc
        .probers
        .values()
        .filter(|p| p.is_fresh(marker.at))
        .count();
    println!(
        "marker {} ({}) recorded in {}; running probers record it in their evidence at their next sync (within {}); probers that saved in the last 15 minutes: {fresh}",
        marker.id,
        marker.kind.as_str(),
        store.location(),
        crate::clock::fmt_duration(cfg.state.poll_interval)
    );
    ExitCode::from(EXIT_OK)
}

/// Append one `marker` line to the evidence file at `path` (which must exist).
fn to_evidence(cfg: &Config, svc: &ServiceConfig, path: &Path, m: Marker) -> ExitCode {
    let record = Record::Marker(MarkerRecord {
        marker_id: m.id.clone(),
        marker_kind: m.kind,
        label: m.label,
        by: m.by,
        given_at: m.at,
    });
    let envelope = Envelope::new(m.at, &svc.service.name, &cfg.prober_id, &record);
    let line = match envelope.to_line() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot encode the marker: {e}");
            return ExitCode::from(EXIT_IO);
        }
    };
    if let Err(e) = append_line(path, &line) {
        eprintln!(
            "error: cannot append to evidence file {}: {}",
            crate::config::escape_controls(&path.display().to_string()),
            crate::config::escape_controls(&e.to_string())
        );
        return ExitCode::from(EXIT_IO);
    }
    println!(
        "marker {} ({}) appended to {}",
        m.id,
        m.kind.as_str(),
        crate::config::escape_controls(&path.display().to_string())
    );
    ExitCode::from(EXIT_OK)
}

/// Append `line` (an envelope line, newline included) to an existing regular file in one write,
/// numbered after the file's last `record_seq` as the prober's writer numbers its lines, and
/// after a newline when the file ends in a torn line, so the marker always starts a line of its
/// own.
fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    use crate::sink::evidence::{ends_torn, last_record_seq, put_numbered};
    let mut opts = std::fs::OpenOptions::new();
    let mut file = crate::regular_file::open_regular(path, opts.read(true).append(true))?;
    let size = file.metadata()?.len();
    let seq = last_record_seq(path, &file, size)?.saturating_add(1);
    let mut bytes = Vec::with_capacity(line.len() + 40);
    if ends_torn(&file, size)? {
        bytes.push(b'\n');
    }
    put_numbered(&mut bytes, seq, line);
    file.write_all(&bytes)?;
    file.sync_data()
}

/// `drill report` arguments.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// An evidence file (repeat for several probers, or a rotated generation), or the
    /// `[evidence.s3]` segments at `s3://bucket/prefix/` (the default AWS chain:
    /// `AWS_REGION`, `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, profile or role).
    #[arg(long, required = true, value_name = "FILE|s3://BUCKET/PREFIX/")]
    evidence: Vec<PathBuf>,
    /// With an s3:// evidence: read the segments from this time on (RFC 3339, e.g.
    /// 2026-12-05T06:00:00Z), and the one open at that time.
    #[arg(long, value_parser = parse_time)]
    from: Option<crate::clock::Millis>,
    /// With an s3:// evidence: read the segments opened up to this time (RFC 3339).
    #[arg(long, value_parser = parse_time)]
    to: Option<crate::clock::Millis>,
    /// With an s3:// evidence: the largest segment read, MiB, as stored and gunzipped; a larger
    /// object is skipped with a line on stderr.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1024))]
    max_segment_mb: u64,
    /// The directory to write report.md, report.html and report.json into (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Only this service's records.
    #[arg(long, short = 's')]
    service: Option<String>,
    /// Add a lane per branch alarm from CloudWatch's alarm history over the drill window.
    #[arg(long)]
    alarms: bool,
    /// With --alarms: read each service of this config through its publish targets (region,
    /// role, endpoint), as its prober publishes; a service the config lacks, and every service
    /// without --config, through the default AWS chain.
    #[arg(long, short, requires = "alarms", value_name = "FILE|s3://BUCKET/KEY")]
    config: Option<ConfigSource>,
}

/// `drill report`: read every evidence file (streamed, a capped line at a time), merge, write
/// the report, print the phase tables.
pub(super) async fn report(a: ReportArgs) -> ExitCode {
    let esc = |p: &Path| crate::config::escape_controls(&p.display().to_string()).into_owned();
    let s3_url = |p: &PathBuf| {
        p.to_str()
            .filter(|p| p.starts_with("s3://"))
            .map(str::to_string)
    };
    if (a.from.is_some() || a.to.is_some()) && !a.evidence.iter().any(|p| s3_url(p).is_some()) {
        eprintln!("error: --from and --to choose the segments of an s3:// --evidence; give one");
        return ExitCode::from(EXIT_INVALID_CONFIG);
    }
    if let (Some(from), Some(to)) = (a.from, a.to)
        && from > to
    {
        eprintln!(
            "error: --from {} is after --to {}: the window would select no segment",
            crate::clock::rfc3339(from),
            crate::clock::rfc3339(to)
        );
        return ExitCode::from(EXIT_INVALID_CONFIG);
    }
    let mut m = Merger::new(a.service.as_deref());
    for path in &a.evidence {
        if let Some(url) = s3_url(path) {
            if let Err(code) = from_s3(&mut m, &url, &a).await {
                return code;
            }
            continue;
        }
        let file = match open_evidence(path) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("error: cannot read evidence file {}: {e}", esc(path));
                return ExitCode::from(EXIT_IO);
            }
        };
        let id = m.file(&path.display().to_string());
        for line in read_lines(std::io::BufReader::new(file)) {
            if let Err(LineError {
                line,
                reason: LineErrorReason::Io(e),
            }) = &line
            {
                eprintln!(
                    "error: cannot read evidence file {} at line {line}: {e}",
                    esc(path)
                );
                return ExitCode::from(EXIT_IO);
            }
            m.push(id, line);
        }
    }
    let services = m.services();
    if a.service.is_none() && services.is_empty() {
        let files: Vec<String> = a.evidence.iter().map(|p| esc(p)).collect();
        eprintln!(
            "error: no evidence record in {}: nothing to report",
            files.join(", ")
        );
        return ExitCode::from(EXIT_INVALID_CONFIG);
    }
    if let Some(s) = &a.service
        && services.is_empty()
    {
        eprintln!(
            "error: --service {}: no record of that service in the evidence",
            crate::config::escape_controls(s)
        );
        return ExitCode::from(EXIT_INVALID_CONFIG);
    }
    // Alarm lanes go in before `finish`, so the phase table reads them too. A failed fetch
    // still writes the report (without the lanes, the failure listed) and exits 74.
    let alarms_failed = if a.alarms {
        match alarms_config(a.config.as_ref()).await {
            Ok(cfg) => add_alarm_lanes(&mut m, &services, cfg.as_ref()).await,
            Err(code) => return code,
        }
    } else {
        false
    };
    // Also under Problems in the report; said here as the tables printed below are off by it.
    for w in m.clock_skew() {
        eprintln!("warning: {}", crate::config::escape_controls(&w));
    }
    let drill = m.finish();
    if let Err(e) = write_report(&a.out, &drill) {
        eprintln!("error: cannot write the report into {}: {e}", esc(&a.out));
        return ExitCode::from(EXIT_IO);
    }
    for s in &drill.services {
        println!("## Service {}\n", markdown::escape(&s.name));
        print!("{}", markdown::episodes(&drill, s));
    }
    if !drill.problems.is_empty() {
        println!(
            "{} problem(s) in the evidence: see report.md",
            drill.problems.len()
        );
    }
    println!("report written to {}", esc(&a.out.join("report.md")));
    ExitCode::from(if alarms_failed { EXIT_IO } else { EXIT_OK })
}

/// RFC 3339 as ms since the epoch.
fn parse_time(s: &str) -> Result<crate::clock::Millis, String> {
    let t = humantime::parse_rfc3339_weak(s)
        .map_err(|e| format!("{e}; write e.g. 2026-12-05T06:00:00Z"))?;
    let d = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "before 1970".to_string())?;
    crate::clock::Millis::try_from(d.as_millis()).map_err(|_| "too far ahead".to_string())
}

/// Feed the segments of `--from`..`--to` at `url` into `m`, with progress on stderr; a segment
/// that is not one (too large, not gzip, a stray key) is skipped with a line on stderr.
/// `Err` is the exit code: 64 a bad location or a listing over its bounds, 74 S3 failed.
async fn from_s3(m: &mut Merger, url: &str, a: &ReportArgs) -> Result<(), ExitCode> {
    use crate::report::s3_evidence::{self as s3, Limits, ReadError};
    let say = |s: &str| eprintln!("{}", crate::config::escape_controls(s));
    let loc = s3::Location::parse(url).map_err(|e| {
        say(&format!("error: --evidence: {e}"));
        ExitCode::from(EXIT_INVALID_CONFIG)
    })?;
    let limits = Limits {
        max_object_bytes: a.max_segment_mb << 20,
        ..Limits::default()
    };
    let client = s3::client(std::time::Duration::from_secs(30)).await;
    let mut skipped = Vec::new();
    let listed = s3::list(&client, &loc, (a.from, a.to), limits, &mut skipped).await;
    for s in skipped.drain(..) {
        say(&format!("warning: {s}"));
    }
    let segments = listed.map_err(|e| {
        let (why, code) = match e {
            s3::ListError::Fail(why) => (why, EXIT_IO),
            s3::ListError::Bound(why) => (why, EXIT_INVALID_CONFIG),
        };
        say(&format!("error: {why}"));
        ExitCode::from(code)
    })?;
    let total: u64 = segments.iter().map(|s| s.size).sum();
    say(&format!(
        "listed {} segments ({total} bytes) at {url}",
        segments.len()
    ));
    if total > limits.max_total_bytes {
        say(&format!(
            "error: the window's segments take {total} bytes, over the cap of {}: narrow it with --from and --to",
            limits.max_total_bytes
        ));
        return Err(ExitCode::from(EXIT_INVALID_CONFIG));
    }
    let n = segments.len();
    for (k, seg) in segments.iter().enumerate() {
        match s3::read(&client, &loc, seg, limits).await {
            Ok(bytes) => {
                let id = m.file(&loc.url_of(&seg.key));
                for line in read_lines(bytes.as_slice()) {
                    m.push(id, line);
                }
            }
            Err(ReadError::Skip(why)) => say(&format!("warning: {why}")),
            Err(ReadError::Fail(why)) => {
                say(&format!("error: {why}"));
                return Err(ExitCode::from(EXIT_IO));
            }
        }
        if (k + 1) % 25 == 0 || k + 1 == n {
            say(&format!("read {}/{n}", k + 1));
        }
    }
    Ok(())
}

/// Open evidence file `path` for reading: a regular file, through symbolic links (a copy may be
/// one). A FIFO, a device or a directory is refused before a read, which would block or never
/// end (`/dev/zero`); the open itself does not wait for a FIFO's writer.
fn open_evidence(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, device or directory)",
        ));
    }
    Ok(file)
}

/// How long `--alarms` may take per service, every call included.
const ALARMS_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// The config `--alarms` reads the publish targets of, if `--config` names one (exit 64 when it
/// cannot be read or is invalid).
async fn alarms_config(source: Option<&ConfigSource>) -> Result<Option<Config>, ExitCode> {
    match source {
        Some(source) => super::load(source, None).await.map(|(cfg, _, _)| Some(cfg)),
        None => Ok(None),
    }
}

/// Each service's branch alarms from CloudWatch, looked up on the `Readiness` metric in the
/// namespace its `start` records name: through each of its publish targets in `cfg`, else
/// through the default AWS chain (`AWS_REGION`, `AWS_ENDPOINT_URL`, ...). A target that fails
/// is not asked again for later services. True when a fetch failed (named on stderr and in
/// the report).
async fn add_alarm_lanes(m: &mut Merger, services: &[String], cfg: Option<&Config>) -> bool {
    use crate::report::alarms;
    let window = m.window();
    let mut clients = alarms::Clients::default();
    let mut failed = false;
    let todo: Vec<(&String, Vec<alarms::Source>)> = services
        .iter()
        .map(|s| (s, alarms::sources(cfg, s)))
        .collect();
    for (k, (s, sources)) in todo.iter().enumerate() {
        let (ns, branches) = m.metric_series(s);
        let ns = ns.unwrap_or(crate::contract::DEFAULT_NAMESPACE).to_string();
        let mut lanes = Vec::new();
        for source in sources {
            let Some(client) = clients.get(source).await else {
                continue;
            };
            let at = source
                .name
                .as_deref()
                .map_or(String::new(), |n| format!(" at target {n}"));
            match alarms::fetch(&client, &ns, s, &branches, window, ALARMS_BUDGET).await {
                Ok(got) => {
                    lanes.extend(got.lanes.into_iter().map(|mut l| {
                        l.target.clone_from(&source.name);
                        l
                    }));
                    for p in got.problems {
                        m.note_problem(format!("--alarms{at}: {p}"));
                    }
                }
                Err(e) => {
                    let what = format!("--alarms: service {s}{at}: {e}; no alarm lanes");
                    eprintln!("error: {}", crate::config::escape_controls(&what));
                    m.note_problem(what);
                    failed = true;
                    // Asking the failed target again per service would multiply the wait.
                    clients.give_up(source);
                    let rest = todo[k + 1..]
                        .iter()
                        .filter(|(_, later)| later.iter().any(|x| x.same_target(source)))
                        .count();
                    if rest > 0 {
                        m.note_problem(format!(
                            "--alarms: the {rest} remaining service(s) not asked{at} after that failure; no alarm lanes"
                        ));
                    }
                }
            }
        }
        m.set_alarms(s, lanes);
    }
    failed
}

/// `report.md`, `report.html` and `report.json` (the model, for scripts) in `dir`, created if
/// missing.
fn write_report(dir: &Path, drill: &Drill) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(drill).map_err(std::io::Error::other)?;
    replace_file(dir, "report.json", (json + "\n").as_bytes())?;
    replace_file(dir, "report.md", markdown::render(drill).as_bytes())?;
    replace_file(dir, "report.html", html::render(drill).as_bytes())
}

/// Write `bytes` to `dir/name` through a new temporary file renamed over it: a file already
/// there (an earlier report) is replaced whole, and a symbolic link there is replaced, never
/// followed (a link in a shared directory cannot make the report overwrite its target).
pub(super) fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes));
    let renamed = written.and_then(|()| std::fs::rename(&tmp, dir.join(name)));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The appended line goes on from the file's last `record_seq`, also after a torn line, and
    /// from the rotated generation when the file holds no numbered line.
    #[test]
    fn the_appended_line_continues_record_seq() {
        use crate::sink::evidence::put_numbered;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("evidence.jsonl");
        let line = "{\"at\":\"x\",\"kind\":\"marker\"}\n";
        let seq_of = |l: &str| -> u64 {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["record_seq"].as_u64().unwrap()
        };
        let mut text = Vec::new();
        put_numbered(&mut text, 41, line);
        put_numbered(&mut text, 42, line);
        text.extend_from_slice(b"{\"record_seq\":99,\"at");
        std::fs::write(&p, &text).unwrap();
        append_line(&p, line).unwrap();
        let after = std::fs::read_to_string(&p).unwrap();
        assert_eq!(seq_of(after.lines().last().unwrap()), 43, "{after}");

        std::fs::rename(&p, dir.path().join("evidence.jsonl.1")).unwrap();
        std::fs::write(&p, "").unwrap();
        append_line(&p, line).unwrap();
        assert_eq!(seq_of(&std::fs::read_to_string(&p).unwrap()), 44);
    }

    #[test]
    fn labels_are_one_printable_line_of_at_most_200_characters() {
        assert!(check_mark("blocked writer path", "alice").is_ok());
        assert!(check_mark(&"é".repeat(MAX_LABEL_CHARS), "alice").is_ok());
        let long = check_mark(&"x".repeat(MAX_LABEL_CHARS + 1), "alice").unwrap_err();
        assert!(long.contains("201 characters"), "{long}");
        assert!(check_mark("  ", "alice").unwrap_err().contains("empty"));
        assert!(check_mark("x", "").unwrap_err().contains("empty"));
        let by = "b".repeat(crate::control::MAX_BY_CHARS);
        assert!(check_mark("x", &by).is_ok());
        let long = check_mark("x", &(by + "b")).unwrap_err();
        assert!(
            long.contains("--by has 101 characters; at most 100"),
            "{long}"
        );
        for bad in ["a\nb", "a\u{1b}[2Jb", "a\tb"] {
            assert!(check_mark(bad, "alice").unwrap_err().contains("control"));
            assert!(check_mark("ok", bad).unwrap_err().contains("control"));
        }
    }
}
