use super::*;
use crate::record::{AttemptAbandoned, read_lines};
use serde_json::Value;
use std::time::Duration;

fn abandoned(seq: u64) -> Record {
    Record::AttemptAbandoned(AttemptAbandoned {
        branch: "primary".into(),
        seq,
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
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20).unwrap();
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
    let mut w = EvidenceWriter::open(&p, "s", "p", 4096).unwrap();
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
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20).unwrap();
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
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20).unwrap();
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
    let e = EvidenceWriter::open(&p, "s", "p", 1 << 20).unwrap_err();
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
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20).unwrap();
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
    let e = EvidenceWriter::open(&p, "s", "p", 1 << 20).unwrap_err();
    let named = format!("{} is a symbolic link", p.display());
    assert!(e.to_string().contains(&named), "{e}");
    std::fs::remove_file(&p).unwrap();

    let moved = dir.path().join("moved.jsonl");
    let mut w = EvidenceWriter::open(&p, "s", "p", 1 << 20).unwrap();
    std::fs::rename(&p, &moved).unwrap();
    std::os::unix::fs::symlink(&target, &p).unwrap();
    w.reopen_if_replaced(1);
    w.record(2, &abandoned(1));
    assert!(w.close(soon()).await);
    assert_eq!(kinds(&moved), ["attempt_abandoned"]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "root:x:0:0\n");
}
