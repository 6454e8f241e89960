use std::process::ExitCode;

use clap::Parser as _;
use sockwatch::{
    cli::{Cli, Command},
    commands,
    kernel::loader::LoadError,
};

/// A parent that closed stdin, stdout or stderr would let the first file the agent opens (a
/// map, the events file) take that number, and then stdout's lines would land in it: such a
/// slot gets /dev/null instead.
fn fill_closed_standard_fds() {
    for fd in 0..=2 {
        // SAFETY: F_GETFD only queries the descriptor table.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            // SAFETY: a NUL-terminated path; open takes the lowest free number, this one.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        }
    }
}

fn main() -> ExitCode {
    fill_closed_standard_fds();
    let cli = Cli::parse();
    sockwatch::logging::init(cli.log_format);
    let result = match cli.command {
        Command::Run(args) => commands::run::run(args),
        Command::Explain(args) => commands::explain::explain(args),
        Command::Check(args) => return commands::check::main(args),
        Command::Replay(args) => commands::replay::replay(args),
        Command::Scan(args) => {
            return commands::scan::scan(args).unwrap_or_else(|e| {
                eprintln!("sockwatch: {e:#}");
                ExitCode::from(2)
            });
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sockwatch: {e:#}");
            // Too few hooks for the kernel to give: as final as bad flags.
            match e.downcast_ref::<LoadError>() {
                Some(LoadError::Coverage(_)) => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}
