//! What unlink and rename share: the file a removal displaces, checked at the operation's
//! entry and reported at its exit (exact tiers), or a path filtered by name (tracepoint tier).
//! A rename also reports the live socket file it moves, and both files of an exchange.
use aya_ebpf::{
    EbpfContext as _,
    helpers::bpf_probe_read_user_str_bytes,
    programs::{FExitContext, RetProbeContext, TracePointContext},
};
use sockwatch_common::{EventKind, Fidelity, FileId, Flavor, PATH_CAP, Tier, flags};

use super::tp_ret;
use crate::{
    current, emit,
    guard::{self, Decision},
    live,
    maps::SCRATCH,
    pending,
    record::{Pending, Slot},
    shim::{self, Dentry},
};

/// `AT_FDCWD`: a path relative to the working directory.
pub const AT_FDCWD: i32 = -100;

/// An operation that removes a name: the file it displaces is what is reported.
#[derive(Clone, Copy)]
pub enum Removal {
    Unlink,
    /// A rename onto an existing file, of a live socket's file, or an exchange.
    Rename,
}

impl Removal {
    #[inline(always)]
    fn kind(self) -> EventKind {
        match self {
            Removal::Unlink => EventKind::Unlink,
            Removal::Rename => EventKind::Rename,
        }
    }

    #[inline(always)]
    fn slot(self) -> Slot {
        match self {
            Removal::Unlink => Slot::Unlink,
            Removal::Rename => Slot::Rename,
        }
    }
}

/// Entry: keeps the record of a socket file about to be removed.
#[inline(always)]
pub fn begin(op: Removal, victim: Dentry, flavor: Flavor) {
    if current::is_agent() || victim.is_null() {
        return;
    }
    let mut p = Pending::default();
    if live::inspect_victim(victim, flavor, &mut p) {
        pending::stash(op.slot(), &p);
    } else {
        pending::nest(op.slot());
    }
}

/// fexit tier's exit: the result follows the function's `nargs` arguments.
#[inline(always)]
pub fn fexit_end(op: Removal, ctx: &FExitContext, nargs: u32, flavor: Flavor) -> i32 {
    let ret = shim::ctx_arg(ctx.as_ptr(), nargs) as i32;
    end(op, i64::from(ret), Tier::Fentry, flavor);
    0
}

#[inline(always)]
pub fn kret_end(op: Removal, ctx: &RetProbeContext, flavor: Flavor) -> u32 {
    end(op, i64::from(ctx.ret::<i32>()), Tier::Kprobe, flavor);
    0
}

/// Exit: reports a successful removal whose entry kept a record. Only socket files were
/// kept: no record is the common, regular-file case.
#[inline(always)]
fn end(op: Removal, ret: i64, tier: Tier, flavor: Flavor) {
    if let Some(p) = pending::take(op.slot(), false)
        && ret == 0
    {
        let outcome = Outcome::known(ret);
        report(op, &p, tier, outcome, flavor, Names::after(&p));
    }
}

/// How a removal's report ends: its result, flags known only then, and `aux`.
#[derive(Clone, Copy)]
struct Outcome {
    ret: i64,
    extra: u16,
    /// The policy that refused the removal, or would have (audit mode).
    aux: u32,
}

impl Outcome {
    /// Reported before the operation, which may still fail.
    const BEFORE: Outcome = Outcome {
        ret: 0,
        extra: flags::RESULT_UNKNOWN,
        aux: 0,
    };

    #[inline(always)]
    fn known(ret: i64) -> Outcome {
        Outcome {
            ret,
            extra: 0,
            aux: 0,
        }
    }
}

/// Where an event's names and the moved file's identity come from.
struct Names {
    /// The dentry bearing the new name (the removed name, for an unlink).
    new: Dentry,
    /// An exchange's dentry bearing the old name, else null.
    old: Dentry,
    from: FileId,
}

impl Names {
    /// Before the operation (LSM): the target bears the new name, the source the old one.
    #[inline(always)]
    fn before(p: &Pending) -> Self {
        Self::of(p, p.ptr as Dentry, p.arg as Dentry)
    }

    /// After a rename the moved dentry (`arg`, kept for renames only) bears the new name,
    /// exchanged or not, and after an exchange the target's bears the old one.
    #[inline(always)]
    fn after(p: &Pending) -> Self {
        if p.arg == 0 {
            return Self::of(p, p.ptr as Dentry, core::ptr::null());
        }
        Self::of(p, p.arg as Dentry, p.ptr as Dentry)
    }

    #[inline(always)]
    fn of(p: &Pending, new: Dentry, old: Dentry) -> Self {
        let exchange = p.flags & flags::EXCHANGE != 0;
        Names {
            new,
            old: if exchange { old } else { core::ptr::null() },
            from: moved_id(p),
        }
    }
}

/// The identity of the file a rename moved (its dentry is `arg`) when it is a live socket's
/// file or one end of an exchange, else zero.
#[inline(always)]
fn moved_id(p: &Pending) -> FileId {
    if p.flags & (flags::FROM_LIVE | flags::EXCHANGE) == 0 {
        return FileId::default();
    }
    shim::dentry_file(p.arg as Dentry)
        .map(|f| f.id())
        .unwrap_or_default()
}

/// LSM tier: reports a socket file at once, before the removal; its result is not known
/// unless the guard refuses it (the returned `-EPERM`).
#[inline(always)]
pub fn report_before(op: Removal, victim: Dentry, flavor: Flavor) -> i32 {
    if current::is_agent() {
        return 0;
    }
    let mut p = Pending::default();
    if live::inspect_victim(victim, flavor, &mut p) {
        report_guarded(op, p, victim, flavor)
    } else {
        0
    }
}

/// Reports a removal seen before it happens, after the guard's decision on it.
#[inline(always)]
fn report_guarded(op: Removal, mut p: Pending, victim: Dentry, flavor: Flavor) -> i32 {
    let (ret, outcome) = match guard::decide(&p, victim) {
        Decision::Refuse(policy) => {
            p.flags |= flags::DENIED;
            let refused = Outcome {
                aux: policy as u32,
                ..Outcome::known(i64::from(guard::REFUSE))
            };
            (guard::REFUSE, refused)
        }
        Decision::WouldRefuse(policy) => {
            p.flags |= flags::WOULD_DENY;
            let let_through = Outcome {
                aux: policy as u32,
                ..Outcome::BEFORE
            };
            (0, let_through)
        }
        Decision::Pass => (0, Outcome::BEFORE),
    };
    report(op, &p, Tier::Lsm, outcome, flavor, Names::before(&p));
    ret
}

/// Rename entry (fentry, kprobe): keeps the record of a rename that displaces or swaps a
/// socket file, or moves a live one. `source` is the file moved, `target` the new name's.
#[inline(always)]
pub fn rename_begin(source: Dentry, target: Dentry, exchange: bool, flavor: Flavor) {
    if current::is_agent() {
        return;
    }
    let mut p = Pending::default();
    if rename_record(source, target, exchange, flavor, &mut p) {
        pending::stash(Slot::Rename, &p);
    } else {
        pending::nest(Slot::Rename);
    }
}

/// LSM tier: reports a rename before it happens. An exchange calls the hook twice, the
/// second time with the arguments swapped back; only that call is reported, so it names the
/// file moved and the target as the syscall did. The guard decides on a rename over a socket
/// file (an exchange removes nothing).
#[inline(always)]
pub fn rename_report_before(source: Dentry, target: Dentry, exchange: bool, flavor: Flavor) -> i32 {
    if current::is_agent() {
        return 0;
    }
    if exchange {
        let first = pending::take(Slot::Rename, false);
        if first.is_none_or(|p| p.ptr != source as u64) {
            // The first call: remember the file it named as the target, the second's source.
            pending::stash(Slot::Rename, &Pending::args(target as u64, 0));
            return 0;
        }
    }
    let mut p = Pending::default();
    if !rename_record(source, target, exchange, flavor, &mut p) {
        return 0;
    }
    // Without a socket file at the target nothing is displaced (its identity is unset).
    if !exchange && p.file != FileId::default() {
        return report_guarded(Removal::Rename, p, target, flavor);
    }
    let names = Names::before(&p);
    report(
        Removal::Rename,
        &p,
        Tier::Lsm,
        Outcome::BEFORE,
        flavor,
        names,
    );
    0
}

/// Fills `p` (zeroed by the caller) with the record of a rename that concerns a socket file,
/// or returns false: the target's when it is a socket file (as an unlink's victim; for an
/// exchange, whatever file it is), with the moved dentry in `arg` and `FROM_LIVE` when that is
/// a live socket's file.
#[inline(always)]
fn rename_record(
    source: Dentry,
    target: Dentry,
    exchange: bool,
    flavor: Flavor,
    p: &mut Pending,
) -> bool {
    // The descriptor walk first: a branch before it would make the verifier walk it twice.
    let victim = live::inspect_victim(target, flavor, p);
    let moves_live = is_live_socket_file(source);
    if !victim && !moves_live {
        return false;
    }
    if !victim {
        p.ptr = target as u64;
        // An exchange names both ends, socket files or not.
        if exchange {
            p.file = shim::dentry_file(target)
                .map(|f| f.id())
                .unwrap_or_default();
        }
        p.dir = live::parent_id(target);
    }
    p.arg = source as u64;
    if moves_live {
        p.flags |= flags::FROM_LIVE;
    }
    if exchange {
        p.flags |= flags::EXCHANGE;
    }
    true
}

/// Whether `dentry` is a live socket's file (in `LIVE`): no descriptor walk, a move is
/// reported whoever makes it.
#[inline(always)]
fn is_live_socket_file(dentry: Dentry) -> bool {
    !dentry.is_null()
        && shim::dentry_file(dentry)
            .is_some_and(|f| shim::is_sock_mode(f.mode) && live::lookup(&f.id()).is_some())
}

#[inline(always)]
fn report(op: Removal, p: &Pending, tier: Tier, outcome: Outcome, flavor: Flavor, n: Names) {
    if let Some(mut ev) = emit::reserve(op.kind(), tier, Fidelity::Exact) {
        ev.pending(p)
            .ret(outcome.ret)
            .flags(outcome.extra)
            .aux(outcome.aux)
            .from(n.from)
            .removed_path(flavor, n.new);
        if !n.old.is_null() {
            ev.exchanged_name(n.old, live::parent_id(n.old));
        }
        ev.submit();
    }
}

/// Tracepoint tier, entry: keeps a user path whose base name matches a live socket's, with
/// the directory a relative path starts from (`dirfd`, or the working directory).
#[inline(always)]
pub fn path_begin(op: Removal, dirfd: i32, user_path: *const u8) {
    if current::is_agent() || user_path.is_null() {
        return;
    }
    let Some(buf) = SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot of SCRATCH: nothing else uses it while this program runs here.
    let buf: &mut [u8; PATH_CAP] = unsafe { &mut *buf };
    // SAFETY: the helper checks `user_path`, and writes only within `buf`.
    let Ok(s) = (unsafe { bpf_probe_read_user_str_bytes(user_path, buf) }) else {
        return;
    };
    let len = s.len();
    if live::name_is_live(shim::basename_hash(buf, len)) {
        let dir = if buf[0] == b'/' {
            Default::default()
        } else {
            shim::current_dirfd_id(dirfd)
        };
        let p = Pending {
            ptr: user_path as u64,
            dir,
            ..Default::default()
        };
        pending::stash(op.slot(), &p);
    }
}

/// Tracepoint tier, rename entry: keeps a rename whose new or old name is named like a live
/// socket's file, with the directories relative names start from; the old name is kept when
/// it matched, or for an exchange (whose other file then takes it).
#[inline(always)]
pub fn rename_path_begin(old: (i32, *const u8), new: (i32, *const u8), exchange: bool) {
    if current::is_agent() || new.1.is_null() || old.1.is_null() {
        return;
    }
    let (Some(new_name), Some(old_name)) = (read_name(new.1), read_name(old.1)) else {
        return;
    };
    if !new_name.live && !old_name.live {
        return;
    }
    let mut p = Pending {
        ptr: new.1 as u64,
        dir: new_name.start(new.0),
        ..Default::default()
    };
    if old_name.live || exchange {
        p.arg = old.1 as u64;
        p.file = old_name.start(old.0);
    }
    if exchange {
        p.flags |= flags::EXCHANGE;
    }
    pending::stash(Slot::Rename, &p);
}

/// A user path's base name, as far as the tracepoint tier's filter needs it.
struct Name {
    /// Named like a live socket's file.
    live: bool,
    absolute: bool,
}

impl Name {
    /// The directory a relative path starts from (`dirfd`, or the working directory).
    #[inline(always)]
    fn start(&self, dirfd: i32) -> FileId {
        if self.absolute {
            FileId::default()
        } else {
            shim::current_dirfd_id(dirfd)
        }
    }
}

#[inline(always)]
fn read_name(user_path: *const u8) -> Option<Name> {
    let buf = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's slot of SCRATCH: nothing else uses it while this program runs here.
    let buf: &mut [u8; PATH_CAP] = unsafe { &mut *buf };
    // SAFETY: the helper checks `user_path`, and writes only within `buf`.
    let len = unsafe { bpf_probe_read_user_str_bytes(user_path, buf) }
        .ok()?
        .len();
    Some(Name {
        live: live::name_is_live(shim::basename_hash(buf, len)),
        absolute: buf[0] == b'/',
    })
}

/// Tracepoint tier, rename exit: reports a successful rename kept at entry, with its old
/// name when kept.
#[inline(always)]
pub fn rename_path_end(ctx: &TracePointContext) -> u32 {
    if let Some(p) = pending::take(Slot::Rename, false)
        && tp_ret(ctx) == 0
        && let Some(mut ev) = emit::reserve(EventKind::Rename, Tier::Tracepoint, Fidelity::PathOnly)
    {
        ev.dir(p.dir).flags(p.flags);
        if p.arg == 0 {
            ev.user_path(p.ptr as *const u8);
        } else {
            ev.rename_paths(p.ptr as *const u8, p.arg as *const u8, p.file);
        }
        ev.submit();
    }
    0
}

/// Tracepoint tier, exit: reports a successful removal of a kept path.
#[inline(always)]
pub fn path_end(op: Removal, ctx: &TracePointContext) -> u32 {
    if let Some(p) = pending::take(op.slot(), false)
        && tp_ret(ctx) == 0
        && let Some(mut ev) = emit::reserve(op.kind(), Tier::Tracepoint, Fidelity::PathOnly)
    {
        ev.user_path(p.ptr as *const u8).dir(p.dir);
        ev.submit();
    }
    0
}
