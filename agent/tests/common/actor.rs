//! A scriptable helper process: the test binary re-run as an "actor" that performs socket
//! and file operations on command, so each step of a scenario comes from a real, distinct
//! process with its own tgid. Commands on stdin, one per line; replies on stdout as
//! `ACTOR ok <value>` or `ACTOR err <errno>`.
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
        ["exit"] => Ok(String::new()),
        other => panic!("actor: unknown command {other:?}"),
    }
}

/// A running actor process.
pub struct Actor {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub pid: u32,
}

impl Actor {
    pub fn spawn() -> Actor {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
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
