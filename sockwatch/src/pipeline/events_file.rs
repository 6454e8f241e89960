//! The events file (`run --events PATH`) as log shippers and logrotate expect it.
//!
//! - **Opened safely.** `O_WRONLY|O_APPEND|O_NOFOLLOW|O_CLOEXEC|O_NONBLOCK`, first with
//!   `O_CREAT|O_EXCL` so that the agent knows whether it created the file: a file it creates
//!   gets [`EventsFileMode`]'s bits exactly (`fchmod`, whatever the umask); one that exists
//!   keeps its mode and owner (logrotate's `create MODE OWNER GROUP` made it so, for the
//!   shipper), with a warning when others may write it. A symbolic link at the path is refused
//!   (`ELOOP`): root must not append where a user's link points. Links in the directories
//!   above are followed (`/var/run` → `/run`): whoever may change those may change the
//!   path anyway. `O_NONBLOCK` keeps a FIFO at the path without a reader from stalling the
//!   open; it is cleared at once.
//! - **Followed.** Reopened on SIGHUP (logrotate's `postrotate kill -HUP`), and by itself
//!   when the path no longer leads to the open file, renamed or removed: the path is
//!   `lstat`ed once a second ([`Trigger::Check`]) and compared with the open file's
//!   `(st_dev, st_ino)`.
//! - **Never fatal once running.** A failed reopen is logged once per outage and counted
//!   (`sockwatch_events_file_reopen_failures_total`); the lines go on to the file already open
//!   (renamed, it still reaches a shipper that follows inodes; removed, they are lost, as they
//!   would be anywhere else the agent could pick), and the next check tries again.
use std::{
    fs::{File, OpenOptions, Permissions},
    io::{self, Write},
    os::{
        fd::AsRawFd,
        unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _},
    },
    path::{Path, PathBuf},
};

use crate::config::EventsFileMode;

/// A file's identity: `(st_dev, st_ino)`.
pub type FileId = (u64, u64);

/// What asks for a reopen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP: reopen whatever the path holds.
    Hangup,
    /// The once-a-second check: reopen only when the path no longer leads to the open file.
    Check,
}

/// Why the file is reopened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    Hangup,
    /// The path holds another file (the open one renamed, a new one in its place).
    Replaced,
    /// Nothing is at the path, or it cannot be read (the open file removed or renamed away).
    Gone,
}

impl Why {
    fn says(self) -> &'static str {
        match self {
            Why::Hangup => "on SIGHUP",
            Why::Replaced => "the path holds another file",
            Why::Gone => "the file was renamed or removed",
        }
    }
}

/// Whether `trigger` reopens a file `open` whose path now holds `at_path` (`lstat`'s answer,
/// `None` when it failed).
pub fn reopen_because(trigger: Trigger, open: FileId, at_path: Option<FileId>) -> Option<Why> {
    match (trigger, at_path) {
        (Trigger::Hangup, _) => Some(Why::Hangup),
        (Trigger::Check, Some(id)) if id == open => None,
        (Trigger::Check, Some(_)) => Some(Why::Replaced),
        (Trigger::Check, None) => Some(Why::Gone),
    }
}

/// What a [`EventsFile::follow`] did.
#[derive(Debug)]
pub enum Followed {
    /// The path still leads to the open file.
    Kept,
    Reopened {
        why: Why,
        new: FileId,
    },
    /// The reopen failed; the lines go on to the file already open.
    Failed {
        why: Why,
        error: io::Error,
    },
}

/// Failed reopens since the last success: logged at the first, said again at the recovery.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outage(Option<u64>);

impl Outage {
    /// A reopen failed: `true` when it is the first since the last success (log it).
    pub fn failed(&mut self) -> bool {
        let first = self.0.is_none();
        *self.0.get_or_insert(0) += 1;
        first
    }

    /// A reopen succeeded: the failures before it, if there were any.
    pub fn succeeded(&mut self) -> Option<u64> {
        self.0.take()
    }
}

/// What is wrong with a file that existed before the agent opened it, for one warning: owned
/// by another user than the agent's (`euid`), or writable by its group or others. Either can
/// write lines the agent never wrote.
pub fn exposure(mode: u32, uid: u32, euid: u32) -> Option<String> {
    let mut wrong = Vec::new();
    if uid != euid {
        wrong.push(format!("is owned by uid {uid}"));
    }
    if mode & 0o022 != 0 {
        wrong.push(format!(
            "is writable by others (mode {:04o})",
            mode & 0o7777
        ));
    }
    (!wrong.is_empty()).then(|| wrong.join(" and "))
}

/// The open events file and the path it was opened at.
#[derive(Debug)]
pub struct EventsFile {
    path: PathBuf,
    mode: EventsFileMode,
    file: File,
    id: FileId,
    outage: Outage,
}

impl EventsFile {
    /// Opens (or creates) the file at `path`; the error of a symbolic link there says so.
    pub fn open(path: &Path, mode: EventsFileMode) -> io::Result<Self> {
        let (file, id) = open_at(path, mode)?;
        Ok(Self {
            path: path.to_owned(),
            mode,
            file,
            id,
            outage: Outage::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file's identity.
    pub fn id(&self) -> FileId {
        self.id
    }

    /// Reopens the file when `trigger` asks for it; logs the reopen, the first failure of an
    /// outage and the recovery. On failure the file already open stays.
    pub fn follow(&mut self, trigger: Trigger) -> Followed {
        let at_path = self
            .path
            .symlink_metadata()
            .ok()
            .map(|m| (m.dev(), m.ino()));
        let Some(why) = reopen_because(trigger, self.id, at_path) else {
            return Followed::Kept;
        };
        match open_at(&self.path, self.mode) {
            Ok((file, new)) => {
                let (old, failed) = (self.id, self.outage.succeeded());
                self.file = file;
                self.id = new;
                let after = failed.map_or(String::new(), |n| format!(" after {n} failed attempts"));
                log::info!(
                    "events file {}: reopened ({}){after}: inode {}:{} now, was {}:{}",
                    self.path.display(),
                    why.says(),
                    new.0,
                    new.1,
                    old.0,
                    old.1
                );
                Followed::Reopened { why, new }
            }
            Err(error) => {
                if self.outage.failed() {
                    log::warn!(
                        "events file {}: cannot reopen it ({}): {error}; writing on to the file \
                         already open (inode {}:{}), trying again every second (counted in \
                         sockwatch_events_file_reopen_failures_total)",
                        self.path.display(),
                        why.says(),
                        self.id.0,
                        self.id.1
                    );
                }
                Followed::Failed { why, error }
            }
        }
    }
}

impl Write for EventsFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Opens `path` for appending without following a symbolic link there, creating it with
/// `mode` when missing; returns the file and its identity.
fn open_at(path: &Path, mode: EventsFileMode) -> io::Result<(File, FileId)> {
    let (file, created) = open_or_create(path, mode).map_err(|e| explain(path, e))?;
    // Only a FIFO or a device cares; the lines are written blocking, as to stdout.
    clear_nonblock(&file)?;
    let meta = file.metadata()?;
    if created {
        // The umask took bits from the mode open(2) was given: set it exactly.
        file.set_permissions(Permissions::from_mode(mode.bits()))?;
    } else if meta.is_file() {
        // SAFETY: geteuid(2) takes no arguments and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if let Some(wrong) = exposure(meta.mode(), meta.uid(), euid) {
            log::warn!(
                "events file {}: {wrong}: whoever can write it can add lines the agent never \
                 wrote; its mode is left as it is (a file the agent creates gets {})",
                path.display(),
                mode.name()
            );
        }
    }
    Ok((file, (meta.dev(), meta.ino())))
}

/// `O_CREAT|O_EXCL` first (the file is new: `true`), else the file that is there; a file
/// removed between the two is created again.
fn open_or_create(path: &Path, mode: EventsFileMode) -> io::Result<(File, bool)> {
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let mut attempts = 3;
    loop {
        // append: O_WRONLY|O_APPEND; std adds O_CLOEXEC.
        let created = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(mode.bits())
            .custom_flags(flags)
            .open(path);
        match created {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        match OpenOptions::new()
            .append(true)
            .custom_flags(flags)
            .open(path)
        {
            Ok(f) => return Ok((f, false)),
            Err(e) if e.kind() == io::ErrorKind::NotFound && attempts > 0 => attempts -= 1,
            Err(e) => return Err(e),
        }
    }
}

/// The error of an open, with what the agent makes of it when the path is a symbolic link
/// (the caller names the path).
fn explain(path: &Path, e: io::Error) -> io::Error {
    let is_link = path
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink());
    if e.raw_os_error() == Some(libc::ELOOP) && is_link {
        return io::Error::new(
            e.kind(),
            "the path is a symbolic link, which the agent does not follow (whoever placed it \
             could make root append to any file); give the file's own path, or `-` for stdout",
        );
    }
    e
}

fn clear_nonblock(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL and F_SETFL on a descriptor `file` owns; no pointers.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    const OPEN: FileId = (64768, 42);

    #[test]
    fn a_check_reopens_only_when_the_path_leads_elsewhere_and_a_hangup_always() {
        let check = |at| reopen_because(Trigger::Check, OPEN, at);
        assert_eq!(check(Some(OPEN)), None, "still the open file");
        assert_eq!(
            check(Some((64768, 43))),
            Some(Why::Replaced),
            "renamed, new file"
        );
        assert_eq!(check(Some((1, 42))), Some(Why::Replaced), "another device");
        assert_eq!(check(None), Some(Why::Gone), "renamed or removed");
        for at in [Some(OPEN), Some((1, 2)), None] {
            assert_eq!(reopen_because(Trigger::Hangup, OPEN, at), Some(Why::Hangup));
        }
    }

    #[test]
    fn an_outage_is_logged_once_and_its_length_said_at_the_recovery() {
        let mut o = Outage::default();
        assert_eq!(o.succeeded(), None, "nothing failed");
        assert!(o.failed(), "the first failure is logged");
        assert!(!o.failed(), "the second is not");
        assert!(!o.failed());
        assert_eq!(o.succeeded(), Some(3));
        assert_eq!(o, Outage::default());
        assert!(o.failed(), "a new outage is logged again");
    }

    #[test]
    fn a_file_others_can_write_or_another_user_owns_is_named_once() {
        assert_eq!(exposure(0o100600, 0, 0), None);
        assert_eq!(
            exposure(0o100644, 0, 0),
            None,
            "readable is the owner's choice"
        );
        assert_eq!(
            exposure(0o100666, 0, 0).as_deref(),
            Some("is writable by others (mode 0666)")
        );
        assert_eq!(
            exposure(0o100620, 1000, 0).as_deref(),
            Some("is owned by uid 1000 and is writable by others (mode 0620)")
        );
    }

    fn mode_of(path: &Path) -> u32 {
        path.metadata().expect("stat").mode() & 0o7777
    }

    fn id_of(path: &Path) -> FileId {
        let m = path.symlink_metadata().expect("lstat");
        (m.dev(), m.ino())
    }

    #[test]
    fn a_new_file_gets_the_mode_exactly_and_an_existing_one_keeps_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        for mode in EventsFileMode::ALL {
            let path = dir.path().join(format!("{}.jsonl", mode.name()));
            let mut f = EventsFile::open(&path, mode).expect("created");
            assert_eq!(mode_of(&path), mode.bits());
            assert_eq!(f.id(), id_of(&path));
            f.write_all(b"one\n").expect("written");
            drop(f);
            std::fs::set_permissions(&path, Permissions::from_mode(0o644)).expect("chmod");
            let mut f = EventsFile::open(&path, mode).expect("opened");
            f.write_all(b"two\n").expect("appended");
            assert_eq!(mode_of(&path), 0o644, "left as it was");
            assert_eq!(std::fs::read_to_string(&path).expect("read"), "one\ntwo\n");
        }
    }

    #[test]
    fn a_symbolic_link_at_the_path_is_refused_and_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (target, link) = (dir.path().join("target"), dir.path().join("events.jsonl"));
        std::fs::write(&target, "").expect("target");
        symlink(&target, &link).expect("symlink");
        let e = EventsFile::open(&link, EventsFileMode::Private).expect_err("a link");
        assert_eq!(e.raw_os_error(), None, "explained: {e}");
        let text = e.to_string();
        assert!(text.starts_with("the path is a symbolic link"), "{text}");
        assert!(!text.contains('\n'), "one line: {text}");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "");
        // Dangling: refused too, and nothing is created where it points.
        std::fs::remove_file(&target).expect("rm");
        EventsFile::open(&link, EventsFileMode::Private).expect_err("a dangling link");
        assert!(!target.exists());
    }

    #[test]
    fn renamed_or_removed_the_file_is_reopened_at_its_path_and_a_hangup_reopens_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, rotated) = (dir.path().join("events.jsonl"), dir.path().join("events.1"));
        let mut f = EventsFile::open(&path, EventsFileMode::Private).expect("created");
        assert!(matches!(f.follow(Trigger::Check), Followed::Kept));
        f.write_all(b"first\n").expect("written");
        std::fs::rename(&path, &rotated).expect("rotated");
        let Followed::Reopened { why, new } = f.follow(Trigger::Check) else {
            panic!("not reopened")
        };
        assert_eq!((why, new), (Why::Gone, id_of(&path)));
        f.write_all(b"second\n").expect("written");
        std::fs::remove_file(&path).expect("removed");
        assert!(matches!(
            f.follow(Trigger::Check),
            Followed::Reopened { why: Why::Gone, .. }
        ));
        f.write_all(b"third\n").expect("written");
        std::fs::rename(&path, &rotated).expect("rotated again");
        std::fs::write(&path, "").expect("a new file in its place (logrotate's create)");
        let Followed::Reopened { why, new } = f.follow(Trigger::Hangup) else {
            panic!("not reopened")
        };
        assert_eq!((why, new), (Why::Hangup, id_of(&path)));
        f.write_all(b"fourth\n").expect("written");
        assert!(matches!(f.follow(Trigger::Check), Followed::Kept));
        assert_eq!(std::fs::read_to_string(&rotated).expect("read"), "third\n");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "fourth\n");
        assert_eq!(mode_of(&rotated), 0o600, "created by the agent");
    }

    #[test]
    fn a_failed_reopen_keeps_the_open_file_and_the_next_check_tries_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, rotated) = (dir.path().join("events.jsonl"), dir.path().join("events.1"));
        let mut f = EventsFile::open(&path, EventsFileMode::Private).expect("created");
        std::fs::rename(&path, &rotated).expect("rotated");
        symlink("/etc/shadow", &path).expect("a link in its place");
        for attempt in 1..=2 {
            let Followed::Failed { why, error } = f.follow(Trigger::Check) else {
                panic!("followed the link")
            };
            assert_eq!(why, Why::Replaced);
            assert!(error.to_string().contains("symbolic link"), "{error}");
            assert_eq!(f.outage, Outage(Some(attempt)));
        }
        f.write_all(b"kept\n").expect("written");
        assert_eq!(std::fs::read_to_string(&rotated).expect("read"), "kept\n");
        std::fs::remove_file(&path).expect("link removed");
        assert!(matches!(
            f.follow(Trigger::Check),
            Followed::Reopened { .. }
        ));
        assert_eq!(f.outage, Outage::default());
    }
}
