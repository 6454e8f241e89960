//! A scriptable helper process: the test binary re-run as an "actor" that performs socket
//! and file operations on command, so each step of a scenario comes from a real, distinct
//! process with its own tgid. Commands on stdin, one per line; replies on stdout as
//! `ACTOR ok <value>` or `ACTOR err <errno>`. Words are split at whitespace: a name that holds
//! whitespace or any other byte goes as hex ([`hex`]) to the `-hex` commands.
use std::{
    ffi::CString,
    io::{BufRead, BufReader, Write},
    os::unix::net::{UnixDatagram, UnixListener, UnixStream},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
};

/// Entry point of the actor process (the ignored `actor` test of each test binary).
pub fn serve() {
    if std::env::var_os("SOCKWATCH_ACTOR").is_none() {
        return;
    }
    let mut held: Vec<Option<std::os::fd::OwnedFd>> = Vec::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.expect("command");
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = run(&words, &mut held);
        let text = match reply {
            Ok(v) => format!("ACTOR ok {v}"),
            Err(e) => format!("ACTOR err {}", e.raw_os_error().unwrap_or(-1)),
        };
        println!("{text}");
        std::io::stdout().flush().expect("flush");
        match words.as_slice() {
            ["exit"] => std::process::exit(0),
            ["exec-sleep", secs] => exec_sleep(secs),
            _ => {}
        }
    }
}

/// Replaces the actor with `sleep SECS` (same pid): every close-on-exec descriptor, which is
/// every socket std opens, is closed by the exec, not by close(2).
fn exec_sleep(secs: &str) -> ! {
    let (prog, arg) = (cstr("/bin/sleep"), cstr(secs));
    let argv = [prog.as_ptr(), arg.as_ptr(), std::ptr::null()];
    // SAFETY: argv is a NULL-terminated array of NUL-terminated strings that outlive the call.
    unsafe { libc::execv(prog.as_ptr(), argv.as_ptr()) };
    panic!(
        "actor: exec /bin/sleep: {}",
        std::io::Error::last_os_error()
    );
}

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// `bytes` as the `-hex` commands take them: two lowercase hex digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

fn hex_path(hex: &str) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStringExt as _;
    std::ffi::OsString::from_vec(unhex(hex)).into()
}

fn check(rc: i32) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn run(w: &[&str], held: &mut Vec<Option<std::os::fd::OwnedFd>>) -> std::io::Result<String> {
    use std::os::fd::{AsRawFd, OwnedFd};
    match w {
        ["pid"] => Ok(std::process::id().to_string()),
        // set-comm NAME: renames the thread that runs the commands (what the kernel reports).
        ["set-comm", name] => {
            let name = cstr(name);
            // SAFETY: PR_SET_NAME reads a NUL-terminated string that outlives the call.
            check(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) }).map(|_| String::new())
        }
        // The comm of the thread that runs the commands: what the kernel reports it by.
        ["comm"] => std::fs::read_to_string("/proc/thread-self/comm").map(|c| c.trim().into()),
        // bind PATH: a stream socket bound to PATH, not listening; replies its handle.
        ["bind", path] => {
            // SAFETY: socket(2) takes no pointers; the result is checked by from_raw_fd's caller below.
            let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
            // SAFETY: the descriptor was just returned by socket(2) and is owned by nothing else.
            let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            // SAFETY: sockaddr_un is plain old data; all-zero bytes are a valid value.
            let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
            sa.sun_family = libc::AF_UNIX as u16;
            for (i, b) in path.bytes().enumerate() {
                sa.sun_path[i] = b as libc::c_char;
            }
            let len = (2 + path.len() + 1) as u32;
            // SAFETY: `sa` is a valid sockaddr_un and `len` does not exceed its size.
            check(unsafe { libc::bind(fd.as_raw_fd(), (&raw const sa).cast(), len) })?;
            held.push(Some(fd));
            Ok((held.len() - 1).to_string())
        }
        ["listen", h] => {
            let fd = held[h.parse::<usize>().expect("handle")]
                .as_ref()
                .expect("open")
                .as_raw_fd();
            // SAFETY: listen(2) takes no pointers; `fd` is a descriptor this actor holds.
            check(unsafe { libc::listen(fd, 8) }).map(|_| String::new())
        }
        ["listen-on", path] => {
            let l = UnixListener::bind(path)?;
            held.push(Some(l.into()));
            Ok((held.len() - 1).to_string())
        }
        // listen-on-hex HEX: listen-on for a path of any bytes (a newline, an escape, ...).
        ["listen-on-hex", path] => {
            let l = UnixListener::bind(hex_path(path))?;
            held.push(Some(l.into()));
            Ok((held.len() - 1).to_string())
        }
        ["unlink-hex", path] => std::fs::remove_file(hex_path(path)).map(|_| String::new()),
        // set-comm-hex HEX: set-comm for a name of any bytes but NUL.
        ["set-comm-hex", name] => {
            let name = CString::new(unhex(name)).expect("no NUL");
            // SAFETY: PR_SET_NAME reads a NUL-terminated string that outlives the call.
            check(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) }).map(|_| String::new())
        }
        ["close", h] => {
            held[h.parse::<usize>().expect("handle")] = None;
            Ok(String::new())
        }
        ["unlink", path] => {
            // SAFETY: the argument is a NUL-terminated string that outlives the call.
            check(unsafe { libc::unlink(cstr(path).as_ptr()) }).map(|_| String::new())
        }
        ["rmtree", dir] => std::fs::remove_dir_all(dir).map(|_| String::new()),
        ["mkdir", dir] => std::fs::create_dir(dir).map(|_| String::new()),
        ["touch", path] => std::fs::write(path, b"").map(|_| String::new()),
        ["rename", from, to] => std::fs::rename(from, to).map(|_| String::new()),
        // exchange A B: renameat2(A, B, RENAME_EXCHANGE), both names swapped atomically.
        ["exchange", a, b] => {
            let (a, b) = (cstr(a), cstr(b));
            let (cwd, flags) = (libc::AT_FDCWD, libc::RENAME_EXCHANGE);
            // SAFETY: both arguments are NUL-terminated strings that outlive the call.
            check(unsafe { libc::renameat2(cwd, a.as_ptr(), cwd, b.as_ptr(), flags) })
                .map(|_| String::new())
        }
        ["connect", path] => match UnixStream::connect(path) {
            Ok(_) => Ok("0".into()),
            Err(e) => Ok(e.raw_os_error().unwrap_or(-1).to_string()),
        },
        ["sendto", path] => {
            let s = UnixDatagram::unbound()?;
            match s.send_to(b"x", path) {
                Ok(_) => Ok("0".into()),
                Err(e) => Ok(e.raw_os_error().unwrap_or(-1).to_string()),
            }
        }
        // A forked worker (inheriting every descriptor) unlinks PATH and exits; replies its
        // pid and the unlink's errno.
        ["fork-unlink", path] => {
            let p = cstr(path);
            // SAFETY: the actor is single-threaded here; the child only unlinks and exits.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: `p` is a NUL-terminated string copied before the fork.
                let rc = unsafe { libc::unlink(p.as_ptr()) };
                // SAFETY: _exit(2) takes no pointers and never returns.
                unsafe { libc::_exit(if rc == 0 { 0 } else { 1 }) };
            }
            let mut status = 0;
            // SAFETY: `status` is a valid out-pointer for the call.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            Ok(format!("{pid} {}", libc::WEXITSTATUS(status)))
        }
        // Own mount namespace, then a bind mount of a file onto another: pins the source's
        // inode in this namespace whatever happens to its name.
        ["bind-mount", src, dst] => {
            // SAFETY: unshare(2) takes no pointers.
            check(unsafe { libc::unshare(libc::CLONE_NEWNS) })?;
            let root = cstr("/");
            // SAFETY: the pointers are a NUL-terminated string or null, valid for the call.
            check(unsafe {
                libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                )
            })?;
            let (s, d) = (cstr(src), cstr(dst));
            // SAFETY: both paths are NUL-terminated strings that outlive the call; no mount data.
            check(unsafe {
                libc::mount(
                    s.as_ptr(),
                    d.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            })
            .map(|_| String::new())
        }
        ["link", from, to] => std::fs::hard_link(from, to).map(|_| String::new()),
        // dup-to H FD: handle H again at descriptor FD (dup2(2)), a new handle: the table
        // grows to hold it, and every slot between stays empty.
        ["dup-to", h, fd] => {
            let old = held[h.parse::<usize>().expect("handle")]
                .as_ref()
                .expect("open")
                .as_raw_fd();
            // SAFETY: dup2(2) takes no pointers; `old` is a descriptor this actor holds.
            let new = unsafe { libc::dup2(old, fd.parse().expect("descriptor")) };
            check(new.min(0))?;
            // SAFETY: dup2 returned a descriptor, owned by nothing else.
            held.push(Some(unsafe {
                <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(new)
            }));
            Ok((held.len() - 1).to_string())
        }
        // close_range(2) on one handle: a release that is not a close(2).
        ["close-range", h] => {
            let fd = held[h.parse::<usize>().expect("handle")]
                .take()
                .expect("open");
            let raw = fd.as_raw_fd();
            std::mem::forget(fd); // closed by close_range, not by drop
            // SAFETY: close_range(2) takes no pointers; `raw` was this actor's descriptor.
            check(unsafe { libc::syscall(libc::SYS_close_range, raw, raw, 0) } as i32)
                .map(|_| String::new())
        }
        ["exec-sleep", _] => Ok(String::new()),
        // close-while-accepting H: a thread blocks in accept(2) on listener H, then H is
        // closed by close(2) while that thread still holds a reference. The socket serves
        // on until that accept returns; then the thread lets go of it, the last reference.
        ["close-while-accepting", h] => {
            let fd = held[h.parse::<usize>().expect("handle")]
                .take()
                .expect("open");
            accepting_thread(fd.as_raw_fd());
            drop(fd);
            Ok(String::new())
        }
        // fd-inbox NAME: a datagram socket bound to the abstract address @NAME, to receive
        // descriptors on; replies its handle.
        ["fd-inbox", name] => {
            let inbox = UnixDatagram::bind_addr(&abstract_addr(name)?)?;
            held.push(Some(inbox.into()));
            Ok((held.len() - 1).to_string())
        }
        // send-fd NAME H: sends descriptor H by SCM_RIGHTS to the inbox @NAME.
        ["send-fd", name, h] => {
            let fd = held[h.parse::<usize>().expect("handle")]
                .as_ref()
                .expect("open")
                .as_raw_fd();
            let out = UnixDatagram::unbound()?;
            out.connect_addr(&abstract_addr(name)?)?;
            send_fd(out.as_raw_fd(), fd).map(|_| String::new())
        }
        // recv-fd H: receives one descriptor on inbox H; replies the received one's handle.
        ["recv-fd", h] => {
            let inbox = held[h.parse::<usize>().expect("handle")]
                .as_ref()
                .expect("open")
                .as_raw_fd();
            held.push(Some(recv_fd(inbox)?));
            Ok((held.len() - 1).to_string())
        }
        // spawn-inherit H: socket activation as systemd does it: a child gets descriptor H as
        // fd 3 and execs `sleep`, which holds it; replies the child's pid.
        ["spawn-inherit", h] => {
            let fd = held[h.parse::<usize>().expect("handle")]
                .as_ref()
                .expect("open")
                .as_raw_fd();
            spawn_inheriting(fd).map(|pid| pid.to_string())
        }
        ["exit"] => Ok(String::new()),
        other => panic!("actor: unknown command {other:?}"),
    }
}

/// Starts a thread blocked in accept4(2) on `listener` and returns once it is in the call.
/// The thread closes what it accepts and ends.
fn accepting_thread(listener: i32) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: gettid(2) takes no arguments.
        tx.send(unsafe { libc::syscall(libc::SYS_gettid) })
            .expect("send tid");
        // SAFETY: accept4(2) with null address pointers writes nothing back.
        let conn = unsafe {
            libc::syscall(
                libc::SYS_accept4,
                listener,
                std::ptr::null_mut::<libc::sockaddr>(),
                std::ptr::null_mut::<libc::socklen_t>(),
                0,
            )
        };
        if conn >= 0 {
            // SAFETY: `conn` is the descriptor accept4 just returned, owned by nobody else.
            unsafe { libc::close(conn as i32) };
        }
    });
    let tid = rx.recv().expect("the accepting thread's tid");
    let in_accept = || {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
            .is_ok_and(|s| s.split_whitespace().next() == Some(&libc::SYS_accept4.to_string()))
    };
    while !in_accept() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn abstract_addr(name: &str) -> std::io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
}

/// Room for one `SCM_RIGHTS` control message carrying one descriptor (u64-aligned).
#[repr(C, align(8))]
struct OneFdCmsg([u8; 32]);

fn one_fd_msghdr(iov: &mut libc::iovec, cmsg: &mut OneFdCmsg) -> libc::msghdr {
    // SAFETY: msghdr is plain old data; all-zero bytes are a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as usize;
    msg
}

fn send_fd(sock: i32, fd: i32) -> std::io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cmsg = OneFdCmsg([0; 32]);
    let msg = one_fd_msghdr(&mut iov, &mut cmsg);
    // SAFETY: `msg` points at `cmsg`, which has room for one header and one int
    // (CMSG_SPACE(4) <= 32), so the first header and its data are in bounds.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), fd);
    }
    // SAFETY: `msg` and what it points at (`byte`, `cmsg`) outlive the call.
    let n = unsafe { libc::sendmsg(sock, &msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn recv_fd(sock: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cmsg = OneFdCmsg([0; 32]);
    let mut msg = one_fd_msghdr(&mut iov, &mut cmsg);
    // SAFETY: `msg` and what it points at outlive the call.
    if unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel filled `cmsg` within msg_controllen; a null header means none came.
    let fd = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_type != libc::SCM_RIGHTS {
            return Err(std::io::Error::from_raw_os_error(libc::EBADMSG));
        }
        std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>())
    };
    // SAFETY: the descriptor was just installed for this process and is owned by nothing else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Forks a child that makes `fd` its descriptor 3 (inheritable), drops the actor's pipes
/// and execs `sleep 600`; returns the child's pid.
fn spawn_inheriting(fd: i32) -> std::io::Result<i32> {
    let (sleep, arg, null) = (cstr("/bin/sleep"), cstr("600"), cstr("/dev/null"));
    // SAFETY: the actor is single-threaded here; the child calls only async-signal-safe
    // functions on strings copied before the fork, then execs or exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above; every pointer is a NUL-terminated string or the argv's null end.
        unsafe {
            let devnull = libc::open(null.as_ptr(), libc::O_RDWR);
            libc::dup2(devnull, 0);
            libc::dup2(devnull, 1);
            libc::dup2(fd, 3);
            libc::fcntl(3, libc::F_SETFD, 0);
            let argv = [sleep.as_ptr(), arg.as_ptr(), std::ptr::null()];
            libc::execv(sleep.as_ptr(), argv.as_ptr());
            libc::_exit(127);
        }
    }
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(pid)
}

/// A running actor process./// A running actor process.
pub struct Actor {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub pid: u32,
}

impl Actor {
    pub fn spawn() -> Actor {
        Self::spawn_from(&std::env::current_exe().expect("test binary"))
    }

    /// An actor run from `exe`, a link to the test binary elsewhere: to the agent, whose
    /// /proc/PID/exe names that path, another program.
    pub fn spawn_from(exe: &std::path::Path) -> Actor {
        Self::spawn_with(exe, |_| {})
    }

    /// An actor running as user and group `id` (an unprivileged one: 65534, nobody).
    pub fn spawn_as(id: u32) -> Actor {
        use std::os::unix::process::CommandExt as _;
        let exe = std::env::current_exe().expect("test binary");
        Self::spawn_with(&exe, |cmd| {
            cmd.uid(id).gid(id);
        })
    }

    fn spawn_with(exe: &std::path::Path, configure: impl FnOnce(&mut Command)) -> Actor {
        let mut cmd = Command::new(exe);
        configure(&mut cmd);
        let mut child = cmd
            .args([
                "--ignored",
                "--exact",
                "actor",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SOCKWATCH_ACTOR", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn actor");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let pid = child.id();
        Actor {
            child,
            stdin,
            stdout,
            pid,
        }
    }

    /// Runs one command; returns its reply value, or the errno it failed with as `Err`.
    pub fn try_do(&mut self, cmd: &str) -> Result<String, i32> {
        writeln!(self.stdin, "{cmd}").expect("send command");
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("read reply");
            assert!(n > 0, "actor {} died during {cmd:?}", self.pid);
            // libtest's own "test actor ... " may precede the reply on the same line.
            if let Some(at) = line.find("ACTOR ") {
                let rest = line[at + "ACTOR ".len()..].trim_end();
                return match rest.split_once(' ').unwrap_or((rest, "")) {
                    ("ok", v) => Ok(v.to_string()),
                    (_, e) => Err(e.parse().unwrap_or(-1)),
                };
            }
        }
    }

    /// Runs one command that must succeed.
    pub fn must(&mut self, cmd: &str) -> String {
        self.try_do(cmd)
            .unwrap_or_else(|e| panic!("actor {}: {cmd:?} failed with errno {e}", self.pid))
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "exit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}
