//! The Go listener (sockwatch/tests/go/golistener.go) as the S1 and S22 tests drive it: the
//! incident's real `net.Listen("unix", …)`.
use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, ChildStdout, Command, Stdio},
};

use super::{agent, skip};

/// A Go listener (sockwatch/tests/go/golistener.go) on `sock` with `flags`, once it listens.
pub fn go_listen(go: &Path, flags: &[&str], sock: &Path) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(go)
        .args(flags)
        .arg(sock)
        .stdout(Stdio::piped())
        .spawn()
        .expect("go listener");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "listening");
    (child, out)
}

/// SIGTERM to a Go listener; it closes its listener and exits cleanly.
pub fn go_stop(child: &mut Child, out: &mut BufReader<ChildStdout>) {
    // SAFETY: kill(2) takes no pointers; the pid is our own child's, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "closed");
    assert!(child.wait().expect("wait").success());
}

/// The Go listener, or why the test cannot run (an error in CI).
pub fn go_or_skip(test: &str) -> Option<PathBuf> {
    let go = agent::go_listener();
    if go.is_none() {
        assert!(
            std::env::var_os("SOCKWATCH_REQUIRE_TIERS").is_none(),
            "the Go listener is required in CI"
        );
        skip(test, "no Go toolchain and no SOCKWATCH_GO_LISTENER");
    }
    go
}

/// A Go listener that is stopped (SIGTERM, then reaped) when dropped: a successor a test
/// keeps serving until its end.
pub struct GoDaemon {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl GoDaemon {
    pub fn listen(go: &Path, flags: &[&str], sock: &Path) -> Self {
        let (child, out) = go_listen(go, flags, sock);
        Self { child, out }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for GoDaemon {
    fn drop(&mut self) {
        go_stop(&mut self.child, &mut self.out);
    }
}
