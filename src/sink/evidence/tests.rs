use super::*;
use crate::record::{AttemptAbandoned, read_lines};
use serde_json::Value;
use std::time::Duration;

fn abandoned(seq: u64) -> Record {
    Record::AttemptAbandoned(AttemptAbandoned {
        branch: "primary".into(),
        seq,
        cause: None,
    })
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

fn kinds(path: &Path) -> Vec<String> {
    let f = io::BufReader::new(File::open(path).unwrap());
    read_lines(f)
        .map(|e| e.unwrap().record.kind().to_string())
        .collect()
}

#[tokio::test]
async fn reopens_a_removed_file_and_records_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.jsonl");
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap();
    w.record(0, &abandoned(1));
    // Not replaced: nothing happens.
    w.reopen_if_replaced(1);
    // Let the thread write the first record before the file goes.
    for _ in 0..500 {
        if w.written() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    std::fs::remove_file(&p).unwrap();
    w.reopen_if_replaced(2);
    w.record(3, &abandoned(2));
    assert!(w.close(soon()).await);
    assert_eq!(kinds(&p), ["evidence_reopened", "attempt_abandoned"]);
    assert_eq!((w.written(), w.failed()), (3, 0));
}

#[tokio::test]
async fn rotates_at_max_bytes_keeping_one_generation() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("evidence.jsonl");
    let mut w = EvidenceWriter::open(&p, "s", "p", 4096, QUEUE_LINES).unwrap();
    for i in 0..200 {
        w.record(i, &abandoned(i as u64));
    }
    assert!(w.close(soon()).await);
    assert_eq!((w.written(), w.failed()), (200, 0));
    let cur = std::fs::read_to_string(&p).unwrap();
    let prev = std::fs::read_to_string(dir.path().join("evidence.jsonl.1")).unwrap();
    assert!(cur.len() <= 4096 && prev.len() <= 4096);
    // Nothing torn, and the newest record is in the current file.
    for l in cur.lines().chain(prev.lines()) {
        serde_json::from_str::<Value>(l).unwrap();
    }
    assert!(cur.trim_end().ends_with("\"seq\":199}"));
}

#[tokio::test]
async fn records_after_close_count_as_failed() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.jsonl");
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap();
    w.record(0, &abandoned(0));
    assert!(w.close(soon()).await);
    w.record(1, &abandoned(1));
    assert_eq!((w.written(), w.failed()), (1, 1));
    assert!(w.close(soon()).await);
}

/// The writer thread hangs (as on a hung disk): the caller still never waits (records beyond
/// the queue count as failed) and `close` gives up at its deadline.
#[tokio::test]
async fn a_hung_writer_never_blocks_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.jsonl");
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap();
    let (release, stalled) = mpsc::channel();
    w.send(Msg::Stall(stalled));
    let started = std::time::Instant::now();
    let n = QUEUE_LINES as u64 + 500;
    for i in 0..n {
        w.record(1, &abandoned(i));
    }
    assert!(started.elapsed() < Duration::from_secs(1));
    let t = std::time::Instant::now();
    assert!(!w.close(Instant::now() + Duration::from_millis(300)).await);
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(250) && waited < Duration::from_secs(5));
    assert_eq!(w.written(), 0);
    assert!(w.failed() >= 500, "failed {}", w.failed());
    drop(release);
}

fn mkfifo(p: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap();
    assert!(made.success());
}

/// A FIFO planted where the evidence file goes is refused at once, not waited on.
#[tokio::test]
async fn a_fifo_at_the_path_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.jsonl");
    mkfifo(&p);
    let t = std::time::Instant::now();
    let e = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

/// The file replaced by a FIFO mid-run: the reopen is refused (logged, not hung) and records
/// keep going to the file already open.
#[tokio::test]
async fn a_fifo_swapped_in_is_not_opened() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.jsonl");
    let moved = dir.path().join("moved.jsonl");
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap();
    std::fs::rename(&p, &moved).unwrap();
    mkfifo(&p);
    w.reopen_if_replaced(1);
    w.record(2, &abandoned(1));
    assert!(w.close(soon()).await);
    assert_eq!(w.written(), 1);
    assert_eq!(kinds(&moved), ["attempt_abandoned"]);
}

/// A link planted where the evidence file goes, at start or mid-run in place of the file: it is
/// refused naming the path, and the file it points to gets nothing (the process runs as root).
#[tokio::test]
async fn a_symlink_at_the_path_is_refused_and_its_target_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("passwd");
    std::fs::write(&target, "root:x:0:0\n").unwrap();
    let p = dir.path().join("evidence.jsonl");
    std::os::unix::fs::symlink(&target, &p).unwrap();
    let e = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap_err();
    let named = format!("{} is a symbolic link", p.display());
    assert!(e.to_string().contains(&named), "{e}");
    std::fs::remove_file(&p).unwrap();

    let moved = dir.path().join("moved.jsonl");
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap();
    std::fs::rename(&p, &moved).unwrap();
    std::os::unix::fs::symlink(&target, &p).unwrap();
    w.reopen_if_replaced(1);
    w.record(2, &abandoned(1));
    assert!(w.close(soon()).await);
    assert_eq!(kinds(&moved), ["attempt_abandoned"]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "root:x:0:0\n");
}

/// A small tmpfs mounted on a temporary directory, unmounted on drop. `None` when this machine
/// cannot mount one (not root, no privilege): the caller skips, or fails under `CI=true`.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .ok()?;
        if out.status.success() {
            return Some(Tmpfs(dir));
        }
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "cannot mount a tmpfs (needed under CI=true): {why}"
        );
        eprintln!("*** SKIPPED: cannot mount a tmpfs: {why} ***");
        None
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: the writer thread may still hold the file for a moment after `close`.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

/// Wait until the writer thread has handled `n` records (written or failed).
async fn settle(w: &EvidenceWriter, n: u64) {
    for _ in 0..5_000 {
        if w.written() + w.failed() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("writer handled {} of {n} records", w.written() + w.failed());
}

/// On a really full file system (a 64 KiB tmpfs, filled up), records that do not fit are lost
/// whole and counted; the one that fits only in part is cut back off, so after space is freed
/// every line of the file is a whole record, and the records after the loss are all there.
#[tokio::test]
async fn a_full_disk_loses_whole_records_never_part_of_one() {
    let Some(fs) = Tmpfs::mount("64k") else {
        return;
    };
    let p = fs.0.path().join("evidence.jsonl");
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap();
    // Three records leave the file's only page partly used.
    for i in 0..3u64 {
        w.record(i as i64, &abandoned(i));
    }
    settle(&w, 3).await;
    // Fill every other page.
    let filler = fs.0.path().join("filler");
    let mut f = File::create(&filler).unwrap();
    let chunk = vec![b'x'; 512];
    while f.write_all(&chunk).is_ok() {}
    drop(f);
    // These fill the rest of the page; one of them fits only in part; the rest fit not at all.
    for i in 3..103u64 {
        w.record(i as i64, &abandoned(i));
    }
    settle(&w, 103).await;
    assert!(w.failed() > 0, "nothing failed: the disk was not full");
    std::fs::remove_file(&filler).unwrap();
    for i in 103..106u64 {
        w.record(i as i64, &abandoned(i));
    }
    assert!(w.close(soon()).await);
    let (written, failed) = (w.written(), w.failed());
    assert_eq!(written + failed, 106);
    let seqs: Vec<u64> = read_lines(io::BufReader::new(File::open(&p).unwrap()))
        .map(|e| match e.expect("every line a whole record").record {
            Record::AttemptAbandoned(a) => a.seq,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(seqs.len() as u64, written);
    assert_eq!(seqs[seqs.len() - 3..], [103, 104, 105]);
    // The lost records are the gaps in `record_seq`.
    let numbers = record_seqs(&p);
    assert_eq!(numbers.len() as u64, written);
    assert!(numbers.windows(2).all(|s| s[0] < s[1]), "{numbers:?}");
    assert_eq!(*numbers.last().unwrap(), 106);
}

/// A run killed mid-write left part of a line: the next run's first record starts a line of its
/// own, and only the torn line reads back as bad.
#[tokio::test]
async fn a_torn_last_line_from_a_killed_run_is_ended_before_appending() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("evidence.jsonl");
    let whole = Envelope::new(0, "s", "p", &abandoned(1)).to_line().unwrap();
    std::fs::write(&p, format!("{whole}{}", &whole[..20])).unwrap();
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap();
    w.record(1, &abandoned(2));
    assert!(w.close(soon()).await);
    let lines: Vec<_> = read_lines(io::BufReader::new(File::open(&p).unwrap())).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[1].is_err(), "{lines:?}");
    match &lines[2].as_ref().unwrap().record {
        Record::AttemptAbandoned(a) => assert_eq!(a.seq, 2),
        other => panic!("unexpected {other:?}"),
    }
}

fn start_record(service: usize) -> Record {
    use crate::record::{Start, StartBranch};
    let branch = |name: &str, role: &str| StartBranch {
        name: name.into(),
        role: role.into(),
        endpoint: format!("{name}{service}.localhost"),
        port: 10_000,
    };
    Record::Start(Start {
        config: "bench.toml".into(),
        branches: vec![branch("p", "PRIMARY"), branch("s", "SECONDARY")],
        duration_ms: None,
        state_store: format!("state/control-s{service}.json"),
        restored: vec![],
        ..Default::default()
    })
}

/// 5,000 services write their `start` records in the same instant while the writer thread is
/// held (a slow disk at start-up): the queue sized for them refuses none (the fixed queue of
/// 1,024 lines refused 1,301 in the 10,000-branch benchmark), and every one is written, whole
/// and in order, once the thread goes on.
#[tokio::test]
async fn every_start_record_of_thousands_of_services_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.jsonl");
    let services = 5_000;
    let mut w = EvidenceWriter::open(&p, "*", "p", 1 << 30, queue_lines(services)).unwrap();
    let (release, stalled) = mpsc::channel();
    w.send(Msg::Stall(stalled));
    for i in 0..services {
        w.record_for(1, &format!("s{i}"), &start_record(i));
    }
    assert_eq!(w.failed(), 0, "records refused");
    drop(release);
    assert!(w.close(soon()).await);
    assert_eq!((w.written(), w.failed()), (services as u64, 0));
    let order: Vec<String> = read_lines(io::BufReader::new(File::open(&p).unwrap()))
        .map(|e| e.expect("a whole record").service)
        .collect();
    let expected: Vec<String> = (0..services).map(|i| format!("s{i}")).collect();
    assert_eq!(order, expected);
}

/// The `record_seq` of every line of `path`, in file order; a line without one is a failure.
fn record_seqs(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["record_seq"].as_u64().unwrap_or_else(|| panic!("{l}"))
        })
        .collect()
}

/// Every line is numbered, from 1, one more per record, `record_seq` first; the
/// `evidence_reopened` line the writer thread writes itself included.
#[tokio::test]
async fn record_seq_counts_every_record_from_1() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.jsonl");
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap();
    w.record(0, &abandoned(1));
    w.record(1, &abandoned(2));
    settle(&w, 2).await;
    std::fs::remove_file(&p).unwrap();
    w.reopen_if_replaced(2);
    w.record(3, &abandoned(3));
    assert!(w.close(soon()).await);
    assert_eq!(kinds(&p), ["evidence_reopened", "attempt_abandoned"]);
    assert_eq!(record_seqs(&p), [3, 4]);
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.starts_with(r#"{"record_seq":3,"at":"#), "{text}");
}

/// A second run on the same file goes on from the first run's last number.
#[tokio::test]
async fn record_seq_continues_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.jsonl");
    for run in 0..2 {
        let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap();
        for i in 0..3 {
            w.record(i, &abandoned(run));
        }
        assert!(w.close(soon()).await);
    }
    assert_eq!(record_seqs(&p), [1, 2, 3, 4, 5, 6]);
}

/// Numbers run on through rotations; a run that starts on an empty current file (it rotated
/// just before the last run stopped) goes on from the rotated generation's tail.
#[tokio::test]
async fn record_seq_continues_after_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("evidence.jsonl");
    let old = dir.path().join("evidence.jsonl.1");
    let mut w = EvidenceWriter::open(&p, "s", "p", 4096, QUEUE_LINES).unwrap();
    for i in 0..200 {
        w.record(i, &abandoned(i as u64));
    }
    assert!(w.close(soon()).await);
    let (prev, cur) = (record_seqs(&old), record_seqs(&p));
    let all: Vec<u64> = prev.iter().chain(&cur).copied().collect();
    assert_eq!(all, (all[0]..=200).collect::<Vec<_>>());
    assert!(all[0] > 1, "rotated at least twice");

    std::fs::write(&p, "").unwrap();
    let mut w = EvidenceWriter::open(&p, "s", "p", 4096, QUEUE_LINES).unwrap();
    w.record(200, &abandoned(200));
    assert!(w.close(soon()).await);
    assert_eq!(record_seqs(&p), [*prev.last().unwrap() + 1]);
}

/// The tail read at open passes over a torn last line (even one whose number would be higher),
/// a line cut by the start of the read and lines of an older version without numbers; a file
/// with no number anywhere starts at 1.
#[tokio::test]
async fn record_seq_passes_over_a_torn_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("evidence.jsonl");
    let line = Envelope::new(0, "s", "p", &abandoned(1)).to_line().unwrap();
    // More than TAIL_BYTES of numbered lines, then unnumbered ones, then a torn one.
    let mut text = Vec::new();
    let mut seq = 0;
    while (text.len() as u64) < 2 * TAIL_BYTES {
        seq += 1;
        put_numbered(&mut text, seq, &line);
    }
    text.extend_from_slice(line.repeat(3).as_bytes());
    let mut torn = Vec::new();
    put_numbered(&mut torn, seq + 100, &line);
    text.extend_from_slice(&torn[..torn.len() - 10]);
    std::fs::write(&p, &text).unwrap();
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 30, QUEUE_LINES).unwrap();
    w.record(1, &abandoned(2));
    assert!(w.close(soon()).await);
    let last = std::fs::read_to_string(&p).unwrap();
    let last: Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
    assert_eq!(last["record_seq"], seq + 1);

    let fresh = dir.path().join("old.jsonl");
    std::fs::write(&fresh, line.repeat(2)).unwrap();
    let mut w = EvidenceWriter::open(&fresh, "s", "p", 1 << 30, QUEUE_LINES).unwrap();
    w.record(1, &abandoned(2));
    assert!(w.close(soon()).await);
    let last = std::fs::read_to_string(&fresh).unwrap();
    let last: Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
    assert_eq!(last["record_seq"], 1);
}

/// Records refused by a full queue keep their numbers: the file's numbers rise line by line
/// with a gap exactly as wide as the records lost.
#[tokio::test]
async fn a_refused_record_leaves_a_gap_in_record_seq() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.jsonl");
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20, 4).unwrap();
    let (release, stalled) = mpsc::channel();
    w.send(Msg::Stall(stalled));
    for i in 0..10 {
        w.record(i, &abandoned(i as u64));
    }
    drop(release);
    assert!(w.close(soon()).await);
    let (written, failed) = (w.written(), w.failed());
    assert!(failed >= 5, "failed {failed}");
    assert_eq!(written + failed, 10);
    let seqs = record_seqs(&p);
    assert_eq!(seqs.len() as u64, written);
    assert!(seqs.windows(2).all(|s| s[0] < s[1]), "{seqs:?}");
    assert_eq!(*seqs.last().unwrap(), 10);
}

fn attempt(seq: u64) -> Record {
    Record::Attempt(crate::probe::Attempt::bare(
        "primary",
        seq,
        0,
        0,
        crate::probe::Outcome::Success,
    ))
}

/// A rotation that keeps failing (`<path>.1` is a directory) keeps the file within its hard
/// bound: attempts beyond it are refused and counted, the rarer records still go in; once the
/// rotation works again, the file rotates back under `max_bytes`.
#[tokio::test]
async fn a_failing_rotation_keeps_the_file_bounded_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("evidence.jsonl");
    let old = dir.path().join("evidence.jsonl.1");
    // A first record, so the next run's number is read from this file, not the generation in
    // the way.
    let mut w = EvidenceWriter::open(&p, "s", "p", 4096, QUEUE_LINES).unwrap();
    w.record(0, &abandoned(0));
    assert!(w.close(soon()).await);
    std::fs::create_dir(&old).unwrap();
    std::fs::write(old.join("keep"), "x").unwrap();
    let mut w = EvidenceWriter::open(&p, "s", "p", 4096, QUEUE_LINES).unwrap();
    for i in 0..600 {
        w.record(i, &attempt(i as u64));
        if i % 100 == 99 {
            w.record(i, &abandoned(i as u64));
        }
    }
    settle(&w, 606).await;
    let size = std::fs::metadata(&p).unwrap().len();
    assert!(size <= 3 * 4096, "{size} bytes");
    assert!(w.failed() > 0);
    assert_eq!(w.rotation_failures(), 1, "one failure, counted once");
    // The last abandoned record, written after attempts were refused, is in the file.
    assert!(kinds(&p).last().is_some_and(|k| k == "attempt_abandoned"));
    std::fs::remove_dir_all(&old).unwrap();
    for i in 600..700 {
        w.record(i, &attempt(i as u64));
    }
    assert!(w.close(soon()).await);
    assert!(std::fs::metadata(&p).unwrap().len() <= 4096);
    assert!(old.is_file());
}

/// A previous file ending in `record_seq` u64::MAX (hostile, or edited) does not make the
/// numbers wrap to 0: the writer goes on from a bound no real run reaches.
#[tokio::test]
async fn record_seq_never_wraps_after_a_hostile_last_number() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.jsonl");
    std::fs::write(
        &p,
        format!(
            "{{\"record_seq\":{},\"at\":\"x\",\"at_ms\":0,\"service\":\"s\",\"prober\":\"p\",\"kind\":\"stop\"}}\n",
            u64::MAX
        ),
    )
    .unwrap();
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20, QUEUE_LINES).unwrap();
    w.record(0, &abandoned(1));
    w.record(1, &abandoned(2));
    assert!(w.close(soon()).await);
    let seqs = record_seqs(&p);
    assert_eq!(seqs[1..], [(1 << 53) + 1, (1 << 53) + 2], "{seqs:?}");
}

/// With segments: every numbered line goes to a segment as well, segments close at their size,
/// the spool bound deletes the oldest closed ones, and each deletion is counted and recorded as
/// `evidence_segment` (`dropped`) in the evidence; the uploader's records are written too.
#[tokio::test]
async fn segments_carry_the_numbered_lines_and_record_what_the_spool_drops() {
    use super::super::segments::{CLOSED, scan};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("evidence.jsonl");
    let spool = dir.path().join("evidence.spool");
    let (notes_tx, notes) = mpsc::sync_channel(8);
    let out = SegmentOutput {
        spec: SegmentSpec {
            spool: spool.clone(),
            service: "s".into(),
            prober: "p".into(),
            segment: Duration::from_secs(3600),
            max_bytes: 1024,
            spool_max_bytes: 3 * 1024,
        },
        wake: Arc::new(tokio::sync::Notify::new()),
        notes,
        seq_floor: 40,
    };
    let mut w = EvidenceWriter::open_with(&p, ("s", "p"), 1 << 20, QUEUE_LINES, Some(out)).unwrap();
    notes_tx
        .send(Record::EvidenceSegment(EvidenceSegment {
            segment: "s/p/x.jsonl.gz".into(),
            event: SegmentEvent::UploadFailed,
            class: None,
            retry_in_ms: Some(1000),
            bytes: None,
            count: 1,
        }))
        .unwrap();
    for i in 0..60 {
        w.record(i, &abandoned(i as u64));
        // One batch per record, so segments close at their size between them.
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(w.close(soon()).await);
    let lines: Vec<Value> = std::fs::read_to_string(&p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seq = |v: &Value| v["record_seq"].as_u64().unwrap();
    // Numbering goes on from the floor given (the newest segment in S3).
    assert_eq!(seq(&lines[0]), 41);
    let dropped = lines
        .iter()
        .filter(|v| v["kind"] == "evidence_segment" && v["event"] == "dropped")
        .count() as u64;
    assert!(dropped > 0 && dropped == w.segments_dropped(), "{dropped}");
    assert!(lines.iter().any(|v| v["event"] == "upload_failed"));
    // What the spool kept is within its bound, and holds the file's lines, the newest ones.
    let kept = scan(&spool, CLOSED);
    let bytes: u64 = kept.iter().map(|f| f.metadata().unwrap().len()).sum();
    assert!(bytes <= 3 * 1024, "{bytes}");
    let in_segments: Vec<u64> = kept
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(|l| seq(&serde_json::from_str(l).unwrap()))
                .collect::<Vec<_>>()
        })
        .collect();
    let in_file: Vec<u64> = lines.iter().map(seq).collect();
    // The records of the last close's drops are in the file only (no segment is open then).
    let from = in_file.iter().position(|s| *s == in_segments[0]).unwrap();
    assert_eq!(in_segments[..], in_file[from..from + in_segments.len()]);
    assert!(
        in_file.len() - from - in_segments.len() <= 2,
        "{in_file:?} {in_segments:?}"
    );
}
