//! The one way rdml opens a file to read it: refused by type (a FIFO, a device, a socket, a
//! folder) and by size before a byte is read, so that no read waits forever on a pipe or fills
//! memory from `/dev/zero`; rdml's own bookkeeping (a ledger, a run's marker, a journal, a
//! manifest) is read only from a plain file in its folder, never through a symbolic link, since
//! what it names is moved and removed.

use anyhow::{Context as _, Result};
use std::fs::File;
use std::io::Read as _;
use std::path::Path;

/// Whether a symbolic link at the path itself is read through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// A path the caller named (a data set, a checkpoint, a config): a link is their choice.
    Links,
    /// rdml's bookkeeping: a link there was not made by rdml and is refused.
    NoLinks,
}

/// The most a bookkeeping file (ledger, marker, journal, manifest, record) may hold: far above
/// what rdml writes (a ledger of 100,000 files is ~10 MB), far below a machine's memory.
pub const BOOKKEEPING: u64 = 256 << 20;
/// The most a text file the user writes (a config, a data set's list) may hold.
pub const TEXT: u64 = 256 << 20;
/// No bound but the file's own size (weights, images, data files: regular files only).
pub const ANY: u64 = u64::MAX;

/// Whether a plain file is at `path` (`false`: nothing there, or a link that leads nowhere);
/// anything else there (a FIFO, a device, a socket, a folder; a link, for [`Follow::NoLinks`]) is
/// an error that names it, so that a caller never says "no such file" of a pipe.
pub fn is_file(path: &Path, follow: Follow) -> Result<bool> {
    let m = match follow {
        Follow::Links => std::fs::metadata(path),
        Follow::NoLinks => std::fs::symlink_metadata(path),
    };
    match m {
        Err(_) => Ok(false),
        Ok(m) => match kind(&m) {
            None => Ok(true),
            Some(what) => Err(crate::input_error(format!(
                "{} is {what}, not a file: it is left as it is (remove it, or name a file)",
                path.display()
            ))),
        },
    }
}

/// What kind of thing `m` is, in words, when it is not a plain file.
pub fn kind(m: &std::fs::Metadata) -> Option<&'static str> {
    let t = m.file_type();
    if t.is_file() {
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a named pipe (FIFO)");
        }
        if t.is_char_device() || t.is_block_device() {
            return Some("a device");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    if t.is_dir() {
        return Some("a folder");
    }
    if t.is_symlink() {
        return Some("a symbolic link");
    }
    Some("not a plain file")
}

/// Opens `path` for reading if it is a plain file of at most `limit` bytes; returns it and its
/// length. A FIFO is opened without waiting for a writer (`O_NONBLOCK`) and refused; with
/// [`Follow::NoLinks`] a link at the path is refused (`O_NOFOLLOW`).
pub fn open(path: &Path, follow: Follow, limit: u64) -> Result<(File, u64)> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let nofollow = if follow == Follow::NoLinks { libc::O_NOFOLLOW } else { 0 };
        o.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | nofollow);
    }
    let f = match o.open(path) {
        Ok(f) => f,
        Err(e) => {
            if let Ok(m) = std::fs::symlink_metadata(path)
                && follow == Follow::NoLinks
                && m.file_type().is_symlink()
            {
                return Err(crate::input_error(format!(
                    "{} is a symbolic link where rdml keeps a file of its own; rdml does not read through it: \
                     it is left as it is (remove the link to go on)",
                    path.display()
                )));
            }
            return Err(e).with_context(|| format!("cannot read {}", path.display()));
        }
    };
    let m = f
        .metadata()
        .with_context(|| format!("cannot read {}", path.display()))?;
    if let Some(what) = kind(&m) {
        return Err(crate::input_error(format!(
            "{} is {what}, not a file: rdml reads files only (nothing was read)",
            path.display()
        )));
    }
    if m.len() > limit {
        return Err(crate::input_error(format!(
            "{} holds {} bytes, more than the {} such a file can hold: not read",
            path.display(),
            m.len(),
            limit
        )));
    }
    Ok((f, m.len()))
}

/// The bytes of the plain file `path` (at most `limit`; see [`open`]).
pub fn bytes(path: &Path, follow: Follow, limit: u64) -> Result<Vec<u8>> {
    let (f, len) = open(path, follow, limit)?;
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(1 << 30));
    // A file that grows while it is read stops at the limit.
    f.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if out.len() as u64 > limit {
        return Err(crate::input_error(format!(
            "{} grew past {limit} bytes while it was read: not read",
            path.display()
        )));
    }
    Ok(out)
}

/// The UTF-8 text of the plain file `path` (at most `limit` bytes; see [`open`]).
pub fn text(path: &Path, follow: Follow, limit: u64) -> Result<String> {
    String::from_utf8(bytes(path, follow, limit)?)
        .map_err(|_| crate::input_error(format!("{}: not UTF-8 text", path.display())))
}

/// The bytes of one of rdml's own bookkeeping files (a ledger, a marker, a journal, a manifest, a
/// record): never through a link, at most [`BOOKKEEPING`] bytes.
pub fn bookkeeping(path: &Path) -> Result<Vec<u8>> {
    bytes(path, Follow::NoLinks, BOOKKEEPING)
}

/// One of rdml's own JSON records as `T` ([`bookkeeping`]'s checks), `None` when it is absent or
/// does not read as one: the caller goes on as without it.
pub fn record<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&bookkeeping(path).ok()?).ok()
}

/// What is wrong with a JSON file rdml wrote, in words (not serde's): damaged, or of another
/// layout, and where.
pub fn json_problem(e: &serde_json::Error) -> String {
    match e.classify() {
        serde_json::error::Category::Data => format!(
            "JSON, but not the layout rdml writes (a value missing or of another kind at line {}, column {})",
            e.line(),
            e.column()
        ),
        _ => format!("damaged: not JSON (at line {}, column {})", e.line(), e.column()),
    }
}

/// One of rdml's own JSON files as `T`, a failure said in rdml's words: which file, what is wrong
/// with it ([`json_problem`]) and `todo`, what to do about it.
pub fn json<T: serde::de::DeserializeOwned>(bytes: &[u8], path: &Path, todo: &str) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        crate::input_error(format!(
            "{}: not a file rdml can read ({}); {todo}",
            path.display(),
            json_problem(&e)
        ))
    })
}

/// The number of elements of a shape a model or a file declares, `None` where the product does
/// not fit a `usize` (a wrapped product would pass a size check it should fail).
pub fn declared_len(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// An image file opened for decoding (its format guessed from its bytes), after [`open`]'s checks.
pub fn image(path: &Path) -> Result<image::ImageReader<std::io::BufReader<File>>> {
    let (f, _) = open(path, Follow::Links, ANY)?;
    image::ImageReader::new(std::io::BufReader::new(f))
        .with_guessed_format()
        .with_context(|| format!("cannot read image {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO, a device and a folder are refused before anything is read (a FIFO without a
    /// writer would block `read` forever); a link is refused where rdml keeps its own files;
    /// a file above the limit is not read.
    #[cfg(unix)]
    #[test]
    fn only_plain_files_within_their_bound_are_read() {
        let d = std::env::temp_dir().join(format!("rdml-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let fifo = d.join("pipe.png");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = format!("{:#}", bytes(&fifo, Follow::Links, ANY).unwrap_err());
        assert!(e.contains("is a named pipe (FIFO), not a file"), "{e}");
        assert!(image(&fifo).is_err());
        let e = format!("{:#}", bytes(Path::new("/dev/zero"), Follow::Links, ANY).unwrap_err());
        assert!(e.contains("is a device"), "{e}");
        let e = format!("{:#}", bytes(&d, Follow::Links, ANY).unwrap_err());
        assert!(e.contains("is a folder"), "{e}");
        let f = d.join("ledger.json");
        std::fs::write(&f, b"0123456789").unwrap();
        let link = d.join("link.json");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(bytes(&link, Follow::Links, 10).unwrap(), b"0123456789");
        let e = format!("{:#}", bytes(&link, Follow::NoLinks, 10).unwrap_err());
        assert!(
            e.contains("is a symbolic link where rdml keeps a file of its own"),
            "{e}"
        );
        let e = format!("{:#}", bytes(&f, Follow::NoLinks, 9).unwrap_err());
        assert!(e.contains("holds 10 bytes, more than the 9"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
