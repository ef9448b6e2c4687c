//! Files written whole or not at all: a temporary file beside the target, then a rename, so that
//! an interrupted run never leaves half a checkpoint, report or table.

use anyhow::{Context, Result, ensure};
use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same folder, so that a reader never
/// sees a half-written file. On Linux the temporary file has no name until it is whole
/// (`O_TMPFILE`): a kill while writing leaves nothing behind; it is then linked under a temporary
/// name and renamed over `path` at once. Elsewhere (or on a file system without `O_TMPFILE`) the
/// temporary file is created exclusively (never through a link planted under its name) and
/// removed if the write fails. The rename replaces a link at `path` rather than writing through it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    check_writable(path)?;
    remove_leftovers(path);
    let tmp = temp_name(path);
    let _ = std::fs::remove_file(&tmp);
    crate::fault::point("write", &tmp);
    let written = (|| -> Result<()> {
        match anonymous::write(parent(path), bytes, &tmp) {
            Some(r) => r.with_context(|| format!("cannot write {}", path.display()))?,
            None => {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&tmp)
                    .with_context(|| format!("cannot create a file in {}", parent(path).display()))?;
                f.write_all(bytes)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                f.sync_all().ok();
            }
        }
        crate::fault::point("rename", path);
        std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A file written with no name (`O_TMPFILE`), then linked as `name` once whole and synced.
mod anonymous {
    use std::path::Path;

    /// `None` where the system or the file system has no anonymous files (the caller falls back).
    #[cfg(target_os = "linux")]
    pub fn write(dir: &Path, bytes: &[u8], name: &Path) -> Option<std::io::Result<()>> {
        use std::io::Write;
        use std::os::fd::{AsRawFd, FromRawFd};
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).ok();
        if !Path::new("/proc/self/fd").is_dir() {
            return None;
        }
        let d = c(dir)?;
        // SAFETY: `d` is a valid NUL-terminated path; the descriptor returned is owned below.
        let fd = unsafe { libc::open(d.as_ptr(), libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC, 0o666) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        let linked = (|| {
            f.write_all(bytes)?;
            f.sync_all()?;
            crate::fault::point("link", name);
            let proc = c(Path::new(&format!("/proc/self/fd/{}", f.as_raw_fd())))
                .ok_or_else(|| std::io::Error::other("descriptor path"))?;
            let to = c(name).ok_or_else(|| std::io::Error::other("a path with a NUL byte"))?;
            // SAFETY: both are valid NUL-terminated paths for the duration of the call.
            let r = unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    proc.as_ptr(),
                    libc::AT_FDCWD,
                    to.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            };
            if r == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        })();
        Some(linked)
    }

    #[cfg(not(target_os = "linux"))]
    pub fn write(_dir: &Path, _bytes: &[u8], _name: &Path) -> Option<std::io::Result<()>> {
        None
    }
}

fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// `.NAME.PID.tmp` beside `path`: hidden, and distinct per process.
/// Removes the temporary files an earlier write of `path` left when it was killed between its
/// link and its rename: those rdml can prove are its own, by their name (`.NAME.PID.tmp`, as
/// [`temp_name`] makes them), their kind (a plain file, never a link) and their writer (a process
/// that is gone; a live one may be writing it now).
pub fn remove_leftovers(path: &Path) {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(parent(path)) else {
        return;
    };
    let prefix = format!(".{name}.");
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(pid) = file
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix))
            .and_then(|f| f.strip_suffix(".tmp"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if e.file_type().is_ok_and(|t| t.is_file()) && (pid == std::process::id() || gone(pid)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Whether no process `pid` runs (a PID the system reuses counts as running: its file stays).
fn gone(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = i32::try_from(pid) else {
            return false;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let r = unsafe { libc::kill(pid, 0) };
        r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

fn temp_name(path: &Path) -> std::path::PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Checks, before any work, that `path` can be written as a file: its folder exists (or can be
/// made) and `path` is not a folder. Commands call it on their `--out` before computing.
pub fn check_writable(path: &Path) -> Result<()> {
    ensure!(
        !path.as_os_str().is_empty() && path.file_name().is_some(),
        "{}: expected a file name",
        path.display()
    );
    ensure!(!path.is_dir(), "{} is a folder; expected a file name", path.display());
    let dir = parent(path);
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    ensure!(dir.is_dir(), "{} is not a folder", dir.display());
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        let ok = unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0;
        ensure!(ok, "{}: permission denied (cannot write files there)", dir.display());
    }
    Ok(())
}

/// `value` as the bytes of every JSON file rdml writes: pretty, with a final newline.
pub fn json_bytes<T: serde::Serialize>(value: &T) -> Result<Vec<u8>> {
    let mut b = serde_json::to_vec_pretty(value)?;
    b.push(b'\n');
    Ok(b)
}

/// `value` as pretty JSON with a final newline, written atomically.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    write_atomic(path, &json_bytes(value)?)
}
