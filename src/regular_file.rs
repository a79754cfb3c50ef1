//! Opening a file that must be a regular file, without blocking on a FIFO or device and without
//! following a symbolic link: the one way the state store and the evidence writer open files.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Open `path` without waiting, without following a symbolic link, and insist on a regular
/// file. A FIFO at the path would block `open` until a writer (or reader) appears, and a device
/// (`/dev/zero`) would feed an endless read: `O_NONBLOCK` makes `open` return at once (on a
/// regular file it changes nothing). A link planted at the path would make a process that runs
/// as root read or write wherever it points: `O_NOFOLLOW` refuses it, also when it appears
/// between the check and the open. The state store, the evidence writer and the drill log open their files through here.
pub fn open_regular(path: &Path, opts: &mut OpenOptions) -> std::io::Result<File> {
    // Checked first for clear messages: a FIFO without a reader fails the open with ENXIO, a
    // link with ELOOP ("too many levels of symbolic links").
    refuse_non_regular(path)?;
    let file = opts
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => symlink_refused(path),
            _ => e,
        })?;
    let file_type = file.metadata()?.file_type();
    if !file_type.is_file() {
        return Err(not_regular(path, file_type));
    }
    Ok(file)
}

/// Refuse what is at `path` when it is there and is not a regular file (a symbolic link, FIFO,
/// directory, device or socket), with an error naming the path and what it is; `Ok` when it is
/// a regular file or absent (the open that follows reports a missing file its own way).
pub fn refuse_non_regular(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(symlink_refused(path)),
        Ok(m) if !m.is_file() => Err(not_regular(path, m.file_type())),
        _ => Ok(()),
    }
}

/// The error for anything but a regular file or a link, naming the path and what is there.
fn not_regular(path: &Path, file_type: std::fs::FileType) -> std::io::Error {
    use std::os::unix::fs::FileTypeExt;
    let what = if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_char_device() || file_type.is_block_device() {
        "a device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "something else"
    };
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "{} is {what}, not a regular file (remove it: readyprobe opens only regular files there)",
            path.display()
        ),
    )
}

/// The error for a symbolic link where readyprobe opens only regular files, naming the path.
pub fn symlink_refused(path: &Path) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "{} is a symbolic link; refusing to follow it (remove it: readyprobe opens only regular files there)",
            path.display()
        ),
    )
}
