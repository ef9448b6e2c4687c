use super::*;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdml-owned-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const L: &str = ".rdml-test.json";

fn write_set(d: &Path, files: &[(&str, &[u8])], removes: &[&str]) -> Result<Ledger> {
    let mut c = Ledger::open(d, L, "out")?.begin()?;
    for (n, b) in files {
        c.stage(n, b)?;
    }
    let r: Vec<String> = removes.iter().map(|s| s.to_string()).collect();
    c.commit(&r, "out")
}

/// Files rdml wrote are replaced and removed; a user's file of a name rdml would write is
/// refused, one it never named is untouched.
#[test]
fn only_recorded_files_are_replaced_or_removed() {
    let d = scratch("own");
    std::fs::write(d.join("notes.txt"), b"mine").unwrap();
    write_set(&d, &[("a.json", b"1"), ("b.json", b"2")], &[]).unwrap();
    let l = write_set(&d, &[("a.json", b"3")], &["b.json", "notes.txt"]).unwrap();
    assert_eq!(std::fs::read(d.join("a.json")).unwrap(), b"3");
    assert!(!d.join("b.json").exists());
    assert_eq!(std::fs::read(d.join("notes.txt")).unwrap(), b"mine");
    assert_eq!(l.names().collect::<Vec<_>>(), ["a.json"]);
    drop(l);
    std::fs::write(d.join("a.json"), b"edited by the user").unwrap();
    let e = write_set(&d, &[("a.json", b"4")], &[]).unwrap_err().to_string();
    assert!(e.contains("a.json exists and rdml did not write it"), "{e}");
    assert_eq!(std::fs::read(d.join("a.json")).unwrap(), b"edited by the user");
    assert!(
        std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with(".rdml-staging")),
        "a refused change leaves no staging folder"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A change killed before its point of no return is undone, one killed after it finished: the
/// next open settles either, and the folder is the old set or the new one.
#[test]
fn an_interrupted_change_is_settled_by_the_next_open() {
    let d = scratch("settle");
    write_set(&d, &[("a", b"old a"), ("b", b"old b")], &[]).unwrap();
    // Killed while writing: staged files, ledger in phase `writing`.
    let mut c = Ledger::open(&d, L, "out").unwrap().begin().unwrap();
    c.stage("a", b"new a").unwrap();
    drop(c); // as a kill: no clean-up (only the lock goes, as the kernel releases it)
    let l = Ledger::open(&d, L, "out").unwrap();
    assert!(l.owns("a") && l.owns("b"));
    assert_eq!(std::fs::read(d.join("a")).unwrap(), b"old a");
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 3, "a, b and the ledger");
    // Killed in the swap: the ledger says `swapping`, one file moved.
    let mut c = l.begin().unwrap();
    c.stage("a", b"new a").unwrap();
    c.stage("c", b"new c").unwrap();
    let mut p = c.ledger.state.pending.clone().unwrap();
    p.phase = Phase::Swapping;
    p.writes = c.staged.clone();
    p.removes = vec!["b".into()];
    c.ledger.state.pending = Some(p);
    c.ledger.save().unwrap();
    std::fs::rename(c.staging.join("a"), d.join("a")).unwrap();
    drop(c); // as a kill: no clean-up (only the lock goes, as the kernel releases it)
    let l = Ledger::open(&d, L, "out").unwrap();
    assert_eq!(std::fs::read(d.join("a")).unwrap(), b"new a");
    assert_eq!(std::fs::read(d.join("c")).unwrap(), b"new c");
    assert!(!d.join("b").exists());
    assert_eq!(l.names().collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 3, "a, c and the ledger");
    let _ = std::fs::remove_dir_all(&d);
}

/// The ledger earlier versions wrote for a scored folder (each name's admissible digests) is
/// read: a file whose bytes match is rdml's.
#[test]
fn the_earlier_ledger_format_is_read() {
    let d = scratch("before");
    std::fs::write(d.join("r.json"), b"x").unwrap();
    std::fs::write(d.join("s.json"), b"changed").unwrap();
    let old = serde_json::json!({"r.json": [digest(b"x")], "s.json": [digest(b"y")]});
    std::fs::write(d.join(L), old.to_string()).unwrap();
    let l = Ledger::open(&d, L, "out").unwrap();
    assert!(l.owns("r.json") && !l.owns("s.json"));
    drop(l);
    std::fs::write(d.join(L), b"not json").unwrap();
    let e = Ledger::open(&d, L, "out").unwrap_err().to_string();
    assert!(e.contains("is not a ledger rdml wrote"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A live change is another process's, not an interrupted one: a second open is refused while
/// the first ledger lives, and succeeds once it is gone.
#[test]
fn a_folder_has_one_writer_at_a_time() {
    let d = scratch("lock");
    let c = Ledger::open(&d, L, "out").unwrap().begin().unwrap();
    let e = Ledger::open(&d, L, "out").unwrap_err().to_string();
    assert!(e.contains("another rdml process is writing"), "{e}");
    c.abandon().unwrap();
    Ledger::open(&d, L, "out").unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// Finishing an interrupted change never replaces a file the user put in its place meanwhile.
#[test]
fn a_file_put_in_place_meanwhile_is_not_replaced() {
    let d = scratch("meanwhile");
    write_set(&d, &[("a", b"old a")], &[]).unwrap();
    let mut c = Ledger::open(&d, L, "out").unwrap().begin().unwrap();
    c.stage("a", b"new a").unwrap();
    let mut p = c.ledger.state.pending.clone().unwrap();
    p.phase = Phase::Swapping;
    p.writes = c.staged.clone();
    c.ledger.state.pending = Some(p);
    c.ledger.save().unwrap();
    drop(c);
    std::fs::write(d.join("a"), b"the user's").unwrap();
    let e = Ledger::open(&d, L, "out").unwrap_err().to_string();
    assert!(e.contains("changed since rdml began replacing it"), "{e}");
    assert_eq!(std::fs::read(d.join("a")).unwrap(), b"the user's");
    let _ = std::fs::remove_dir_all(&d);
}

/// The family "links in rdml's bookkeeping": a ledger's unfinished change is settled only through
/// what rdml can prove it made. A staging folder that is a link (to a user's folder), a staged
/// file that is a link or has other bytes, a ledger that is a link: refused, nothing moved or
/// removed, the way forward said; a recorded file replaced by a link is not rdml's.
#[cfg(unix)]
#[test]
fn links_in_the_bookkeeping_are_never_followed() {
    use std::os::unix::fs::symlink;
    let d = scratch("links");
    let mine = scratch("links-mine");
    std::fs::write(mine.join("a"), b"the user's a").unwrap();
    let pending = |staging: &str, writes: &[(&str, &[u8])]| {
        let state = State {
            files: BTreeMap::new(),
            pending: Some(Pending {
                staging: staging.into(),
                phase: Phase::Swapping,
                writes: writes.iter().map(|(n, b)| (n.to_string(), digest(b))).collect(),
                removes: vec![],
            }),
        };
        std::fs::write(d.join(L), serde_json::to_vec(&state).unwrap()).unwrap();
    };
    // The staging folder a link to the user's folder, the digest even matching the user's file.
    pending(".rdml-staging-1", &[("a", b"the user's a")]);
    symlink(&mine, d.join(".rdml-staging-1")).unwrap();
    let e = format!("{:#}", Ledger::open(&d, L, "out").unwrap_err());
    assert!(e.contains("is a symbolic link and not the folder rdml made"), "{e}");
    assert_eq!(std::fs::read(mine.join("a")).unwrap(), b"the user's a");
    assert!(!d.join("a").exists());
    // The way forward: the link removed, the change settles with nothing to move.
    std::fs::remove_file(d.join(".rdml-staging-1")).unwrap();
    let l = Ledger::open(&d, L, "out").unwrap();
    assert!(!l.owns("a") && !d.join("a").exists());
    drop(l);
    // A staged file that is a link to the user's file, or a file of other bytes.
    pending(".rdml-staging-2", &[("a", b"the user's a")]);
    std::fs::create_dir(d.join(".rdml-staging-2")).unwrap();
    symlink(mine.join("a"), d.join(".rdml-staging-2/a")).unwrap();
    let e = format!("{:#}", Ledger::open(&d, L, "out").unwrap_err());
    assert!(e.contains("is not the file rdml staged"), "{e}");
    std::fs::remove_file(d.join(".rdml-staging-2/a")).unwrap();
    std::fs::write(d.join(".rdml-staging-2/a"), b"other bytes").unwrap();
    let e = format!("{:#}", Ledger::open(&d, L, "out").unwrap_err());
    assert!(e.contains("is not the file rdml staged"), "{e}");
    assert_eq!(std::fs::read(mine.join("a")).unwrap(), b"the user's a");
    assert!(!d.join("a").exists());
    std::fs::remove_dir_all(d.join(".rdml-staging-2")).unwrap();
    Ledger::open(&d, L, "out").unwrap();
    // A recorded file replaced by a link to the user's file is not rdml's: not replaced, not removed.
    write_set(&d, &[("b", b"rdml's b")], &[]).unwrap();
    std::fs::remove_file(d.join("b")).unwrap();
    std::fs::write(mine.join("b"), b"rdml's b").unwrap();
    symlink(mine.join("b"), d.join("b")).unwrap();
    let e = write_set(&d, &[("c", b"c")], &["b"]).map(|l| l.owns("b"));
    assert!(!e.unwrap());
    assert!(d.join("b").exists() && mine.join("b").exists());
    // The ledger itself a link.
    std::fs::rename(d.join(L), mine.join("ledger")).unwrap();
    symlink(mine.join("ledger"), d.join(L)).unwrap();
    let e = format!("{:#}", Ledger::open(&d, L, "out").unwrap_err());
    assert!(e.contains("is a symbolic link, not a ledger rdml wrote"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&mine);
}

/// The family "leftovers" (issue 52): a kill between a ledger's link and its rename leaves
/// `.NAME.PID.tmp`; the next open removes those rdml can prove are its own (its name, a plain
/// file, a writer that is gone), never a link or a live process's file.
#[cfg(unix)]
#[test]
fn a_killed_writes_temporary_files_are_removed() {
    let d = scratch("leftovers");
    write_set(&d, &[("a", b"a")], &[]).unwrap();
    let dead = d.join(format!(".{L}.999999999.tmp"));
    let live = d.join(format!(".{L}.1.tmp"));
    let link = d.join(format!(".{L}.999999998.tmp"));
    std::fs::write(&dead, b"{}").unwrap();
    std::fs::write(&live, b"{}").unwrap();
    std::os::unix::fs::symlink(d.join("a"), &link).unwrap();
    let other = d.join(".a.999999999.tmp");
    std::fs::write(&other, b"not a ledger's").unwrap();
    let l = Ledger::open(&d, L, "out").unwrap();
    assert!(!dead.exists(), "a gone writer's temporary ledger is removed");
    assert!(live.exists() && std::fs::symlink_metadata(&link).is_ok() && other.exists());
    assert!(l.owns("a"));
    // Any atomic write removes its own name's leftovers.
    crate::atomic::write_atomic(&d.join("a"), b"b").unwrap();
    assert!(!other.exists());
    let _ = std::fs::remove_dir_all(&d);
}
