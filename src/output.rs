//! Where a command's output options (`--out` of eval, attack, robustness, embed, bench-step) may
//! write: one policy, checked before any work and again at the write.
//!
//! - Never over a file of an rdml run folder that rdml itself writes (`model.safetensors`,
//!   `run.json`, `config.toml`, …), nor into its checkpoint or staging folders: those are the
//!   run's, whatever flag is given.
//! - Never over a symbolic link (dangling, looping, or to a file): it is the user's; only a link
//!   to a FIFO or a terminal (`/dev/stdout`) is written through, as the stream it names.
//! - Into a FIFO or a character device (a terminal, `/dev/stdout`) as it is, never replacing it.
//! - Never over anything else that is not a regular file (a socket, a block device).
//! - Over an existing regular file only when asked (`--overwrite`); the new file is written to a
//!   temporary file and renamed, so a reader never sees half of it, and a link at the path is
//!   replaced rather than written through.

use anyhow::{Context, bail};
type Result<T, E = anyhow::Error> = std::result::Result<T, E>;
use std::io::Write;
use std::path::Path;

/// A path in a JSON record (`serialize_with`): as text, any byte that is not UTF-8 shown as
/// U+FFFD, so that a run in a folder whose name is not UTF-8 still gets its records; the record's
/// path names the folder for a reader, and nothing reads a path back from it to open.
pub fn path_text<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

/// [`path_text`] of an optional path.
pub fn opt_path_text<S: serde::Serializer>(p: &Option<std::path::PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => s.serialize_some(&p.to_string_lossy()),
        None => s.serialize_none(),
    }
}

/// How an output path is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A regular file (new, or replaced with `--overwrite`): written atomically.
    File,
    /// A FIFO or character device: written into as it is.
    Stream,
}

/// Checks that `path` may be written, and how.
pub fn check(path: &Path, overwrite: bool) -> Result<Target> {
    refuse_run_files(path)?;
    crate::run_dir::refuse_bookkeeping_name(path)?;
    let link = crate::run_dir::is_link(path);
    // The path as it resolves (through a link), to tell a stream from a file.
    let Ok(meta) = std::fs::metadata(path) else {
        if link {
            bail!(
                "{} is a symbolic link that leads nowhere (dangling or looping): rdml never replaces a link; \
                 remove it or choose another name",
                path.display()
            );
        }
        crate::atomic::check_writable(path)?;
        return Ok(Target::File);
    };
    let t = meta.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() || t.is_char_device() {
            return Ok(Target::Stream);
        }
    }
    if link {
        bail!(
            "{} is a symbolic link (to {}): rdml never replaces a link nor writes through it to a file; \
             name the file itself, or remove the link",
            path.display(),
            std::fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_default()
        );
    }
    if t.is_dir() {
        bail!("{} is a folder; expected a file name", path.display());
    }
    if !t.is_file() {
        bail!(
            "{} is not a regular file (a socket or a block device): rdml does not write there",
            path.display()
        );
    }
    if !overwrite {
        bail!("{} exists; pass ⟨overwrite!⟩ to replace it", path.display());
    }
    crate::atomic::check_writable(path)?;
    Ok(Target::File)
}

/// Refuses a path of a run's own: one of the files rdml writes in a run folder, or anything in its
/// checkpoint or staging folders (`RUN/checkpoint/model.safetensors`, `RUN/.rdml-replaced/…`).
fn refuse_run_files(path: &Path) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let resolved = crate::run_dir::resolve_as_created(dir);
    if let Some(name) = path.file_name().and_then(|n| n.to_str())
        && crate::run_dir::is_own_file(name)
        && (crate::run_dir::is_run_folder(dir) || resolved.as_deref().is_some_and(crate::run_dir::is_run_folder))
    {
        bail!(
            "{} is a file of the rdml run in {} (rdml writes it, and it holds the run's own \
             results); choose another name",
            path.display(),
            dir.display()
        );
    }
    crate::run_dir::refuse_own_folder(dir, path)?;
    Ok(())
}

/// Checks every file of a set (e.g. `embed`'s `.npy` and its side files): each must be a new or
/// (with `overwrite`) replaceable regular file, since the set is written as files.
pub fn check_files(paths: &[std::path::PathBuf], overwrite: bool) -> Result<()> {
    for p in paths {
        if check(p, overwrite)? == Target::Stream {
            bail!("{} is a FIFO or a device; this output is a set of files", p.display());
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` under [`check`]'s policy (checked again: the path may have changed
/// while the command computed).
pub fn write(path: &Path, bytes: &[u8], overwrite: bool) -> Result<()> {
    match check(path, overwrite)? {
        Target::File => crate::atomic::write_atomic(path, bytes),
        Target::Stream => {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            f.write_all(bytes)
                .and_then(|_| f.flush())
                .with_context(|| format!("cannot write {}", path.display()))
        }
    }
}

/// [`write()`] of pretty JSON.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T, overwrite: bool) -> Result<()> {
    write(path, &crate::atomic::json_bytes(value)?, overwrite)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rdml-output-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn new_files_are_written_existing_ones_only_when_asked() {
        let d = scratch("files");
        let f = d.join("m.json");
        assert_eq!(check(&f, false).unwrap(), Target::File);
        write(&f, b"1", false).unwrap();
        let e = write(&f, b"2", false).unwrap_err().to_string();
        assert_eq!(e, format!("{} exists; pass ⟨overwrite!⟩ to replace it", f.display()));
        assert_eq!(std::fs::read(&f).unwrap(), b"1");
        write(&f, b"2", true).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"2");
        let e = check(&d, true).unwrap_err().to_string();
        assert!(e.ends_with("is a folder; expected a file name"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A run's own files are refused even with `--overwrite`; other names in a run are fine,
    /// and the same names outside a run are ordinary files.
    #[test]
    fn a_runs_own_files_are_never_written() {
        let d = scratch("run");
        std::fs::write(d.join(crate::run_dir::MARKER), b"{}").unwrap();
        for name in [
            "model.safetensors",
            "run.json",
            "config.toml",
            "report.html",
            "robustness.json",
        ] {
            std::fs::write(d.join(name), b"keep").unwrap();
            let e = write(&d.join(name), b"x", true).unwrap_err().to_string();
            assert!(e.contains("is a file of the rdml run in"), "{name}: {e}");
            assert_eq!(std::fs::read(d.join(name)).unwrap(), b"keep");
        }
        write(&d.join("metrics.json"), b"x", false).unwrap();
        let plain = scratch("plain");
        write(&plain.join("run.json"), b"x", false).unwrap();
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&plain);
    }

    /// A FIFO is written into and stays a FIFO.
    #[test]
    fn a_fifo_is_written_into_not_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let d = scratch("fifo");
        let p = d.join("pipe");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = {
            let p = p.clone();
            std::thread::spawn(move || std::fs::read(p).unwrap())
        };
        assert_eq!(check(&p, false).unwrap(), Target::Stream);
        write(&p, b"{\"a\": 1}\n", false).unwrap();
        assert_eq!(reader.join().unwrap(), b"{\"a\": 1}\n");
        assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_fifo());
        let e = check_files(std::slice::from_ref(&p), true).unwrap_err().to_string();
        assert!(e.contains("is a FIFO or a device"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Links are never replaced (dangling, looping, or to a file, with `--overwrite` or not);
    /// a link to a character device is written through as the stream it names (issue 38).
    #[test]
    fn links_are_never_replaced() {
        let d = scratch("links");
        let target = d.join("target.json");
        std::fs::write(&target, b"the user's").unwrap();
        let cases = [
            ("to-file", target.clone()),
            ("dangling", d.join("nowhere")),
            ("loop", d.join("loop")),
        ];
        for (name, to) in &cases {
            std::os::unix::fs::symlink(to, d.join(name)).unwrap();
            for overwrite in [false, true] {
                let e = write(&d.join(name), b"x", overwrite).unwrap_err().to_string();
                assert!(e.contains("is a symbolic link"), "{name}: {e}");
                assert!(crate::run_dir::is_link(&d.join(name)), "{name}: the link stays");
            }
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"the user's");
        std::os::unix::fs::symlink("/dev/null", d.join("null")).unwrap();
        assert_eq!(check(&d.join("null"), false).unwrap(), Target::Stream);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Nothing inside a run's checkpoint or staging folders is an output, `--overwrite` or not.
    #[test]
    fn a_runs_checkpoint_folders_are_never_written() {
        let d = scratch("ckpt");
        std::fs::write(d.join(crate::run_dir::MARKER), b"{}").unwrap();
        for inner in ["checkpoint", "checkpoint.old", ".rdml-replaced"] {
            std::fs::create_dir_all(d.join(inner).join("deeper")).unwrap();
            for p in [d.join(inner).join("state.json"), d.join(inner).join("deeper/x.json")] {
                let e = write(&p, b"x", true).unwrap_err().to_string();
                assert!(e.contains("a folder the rdml run in"), "{}: {e}", p.display());
                assert!(!p.exists());
            }
        }
        // Outside a run, a folder of that name is an ordinary one.
        let plain = scratch("ckpt-plain");
        write(&plain.join("checkpoint/a.json"), b"x", false).unwrap();
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&plain);
    }
}
