use std::{cmp::Ordering, path::Path};

use clap::ValueEnum as _;

use super::{
    apt_message::{apt_error, not_served, one_line},
    cache::Kernel,
    series::{Origin, Series},
    sources::{Mirrors, OtherRelease, apt_conf, os_release_field, sources_list},
    version::version_cmp,
};
use crate::arch::Arch;

#[test]
fn newest_kernel_sorts_numerically() {
    let mut names = [
        "linux-image-6.1.0-9-cloud-amd64-unsigned",
        "linux-image-6.1.0-57-cloud-amd64-unsigned",
        "linux-image-6.1.0-55-cloud-amd64-unsigned",
    ];
    names.sort_by(|a, b| version_cmp(a, b));
    assert_eq!(names[2], "linux-image-6.1.0-57-cloud-amd64-unsigned");
    assert_eq!(names[0], "linux-image-6.1.0-9-cloud-amd64-unsigned");

    let a = "linux-image-6.12.9+deb12-cloud-amd64-unsigned";
    let b = "linux-image-6.12.117+deb12-cloud-amd64-unsigned";
    assert_eq!(version_cmp(a, b), Ordering::Less);
    assert_eq!(version_cmp(b, b), Ordering::Equal);
    assert_eq!(version_cmp("6.1", "6.1.0"), Ordering::Less);
    assert_eq!(version_cmp("6.01", "6.1"), Ordering::Equal);
}

#[test]
fn newest_5_10_kernel_sorts_numerically() {
    let mut names = [
        "linux-image-5.10.0-35-cloud-amd64-unsigned",
        "linux-image-5.10.0-9-cloud-amd64-unsigned",
        "linux-image-5.10.0-46-cloud-amd64-unsigned",
        "linux-image-5.10.0-32-cloud-amd64-unsigned",
    ];
    assert_eq!(version_cmp(names[1], names[0]), Ordering::Less, "-9 < -35");
    names.sort_by(|a, b| version_cmp(a, b));
    assert_eq!(
        names,
        [
            "linux-image-5.10.0-9-cloud-amd64-unsigned",
            "linux-image-5.10.0-32-cloud-amd64-unsigned",
            "linux-image-5.10.0-35-cloud-amd64-unsigned",
            "linux-image-5.10.0-46-cloud-amd64-unsigned",
        ]
    );
}

#[test]
fn series_patterns_and_origins() {
    assert_eq!(Series::ALL.map(|s| s.to_string()), ["5.10", "6.1", "6.12"]);
    assert_eq!(
        Series::V5_10.pattern(Arch::X86_64),
        r"^linux-image-5\.10\.0-[0-9]+-cloud-amd64-unsigned$"
    );
    let x86 = |s: Series| s.origin(Arch::X86_64).expect("x86_64 has every series");
    assert_eq!(
        x86(Series::V5_10),
        Origin::Release("bullseye", Arch::X86_64)
    );
    assert_eq!(x86(Series::V6_1), Origin::Host);
    assert_eq!(x86(Series::V6_12), Origin::Host);
    for s in Series::ALL {
        let parsed = Series::from_str(&s.to_string(), false).expect("clap value");
        assert_eq!(parsed, s);
    }
}

#[test]
fn arm64_series() {
    // As `apt-cache search --names-only cloud-arm64` lists them on Debian 12's mirror, beside
    // the signed images, -dbg packages and meta-packages that the patterns leave out.
    let pattern = |s: Series| s.pattern(Arch::Aarch64);
    assert_eq!(
        pattern(Series::V6_1),
        r"^linux-image-6\.1\.0-[0-9]+-cloud-arm64-unsigned$"
    );
    assert_eq!(
        pattern(Series::V6_12),
        r"^linux-image-6\.12\.[0-9]+\+deb12-cloud-arm64-unsigned$"
    );
    let bookworm_arm64 = Origin::Release("bookworm", Arch::Aarch64);
    for s in [Series::V6_1, Series::V6_12] {
        assert_eq!(s.origin(Arch::Aarch64).expect("Debian 12"), bookworm_arm64);
    }
    assert_eq!(Origin::debian12(Arch::Aarch64), bookworm_arm64);
    assert_eq!(Origin::debian12(Arch::X86_64), Origin::Host);
    let err = Series::V5_10
        .origin(Arch::Aarch64)
        .expect_err("no 5.10 for aarch64")
        .to_string();
    assert!(err.contains("5.10") && err.contains("aarch64"), "{err}");
}

#[test]
fn other_release_dirs() {
    assert_eq!(
        OtherRelease::dir("bullseye", Arch::X86_64),
        Path::new("/var/cache/sockwatch-vm/apt-bullseye")
    );
    assert_eq!(
        OtherRelease::dir("bookworm", Arch::Aarch64),
        Path::new("/var/cache/sockwatch-vm/apt-bookworm-arm64")
    );
}

#[test]
fn mirrors_from_the_machines_sources() {
    let listing = "\
deb Packages bookworm http://deb.debian.org/debian/
deb DEP-11 bookworm http://deb.debian.org/debian/
deb Packages bookworm-updates http://deb.debian.org/debian/
deb Packages bookworm-security http://deb.debian.org/debian-security/
deb Packages nodistro https://deb.nodesource.com/node_20.x/
";
    assert_eq!(
        Mirrors::from_indextargets(listing, "bookworm"),
        Some(Mirrors {
            archive: "http://deb.debian.org/debian".into(),
            security: Some("http://deb.debian.org/debian-security".into()),
        })
    );
    // Only the updates suite, no security mirror.
    let listing = "deb Packages bookworm-updates http://mirror.example/debian/\n";
    assert_eq!(
        Mirrors::from_indextargets(listing, "bookworm"),
        Some(Mirrors {
            archive: "http://mirror.example/debian".into(),
            security: None,
        })
    );
    assert_eq!(
        Mirrors::from_indextargets("deb-src Sources bookworm http://m/debian/\n", "bookworm"),
        None
    );
    assert_eq!(Mirrors::from_indextargets("", "bookworm"), None);
}

/// deb.debian.org's archive and security archive.
fn debian_mirrors() -> Mirrors {
    Mirrors {
        archive: "http://deb.debian.org/debian".into(),
        security: Some("http://deb.debian.org/debian-security".into()),
    }
}

#[test]
fn bullseye_sources_list() {
    let mirrors = debian_mirrors();
    let opts = "[arch=amd64 target=Packages \
                signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]";
    let entries: Vec<_> = sources_list("bullseye", Arch::X86_64, &mirrors)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        entries,
        [
            format!("deb {opts} http://deb.debian.org/debian bullseye main"),
            format!("deb {opts} http://deb.debian.org/debian bullseye-updates main"),
            format!("deb {opts} http://deb.debian.org/debian-security bullseye-security main"),
        ]
    );
    let without_security = sources_list(
        "bullseye",
        Arch::X86_64,
        &Mirrors {
            security: None,
            ..mirrors
        },
    );
    assert!(!without_security.contains("security"));
    assert!(without_security.ends_with("bullseye-updates main\n"));
}

#[test]
fn bookworm_arm64_sources_list() {
    let mirrors = debian_mirrors();
    let opts = "[arch=arm64 target=Packages \
                signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]";
    let list = sources_list("bookworm", Arch::Aarch64, &mirrors);
    assert!(list.starts_with("# Written by "), "{list}");
    let entries: Vec<_> = list.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        entries,
        [
            format!("deb {opts} http://deb.debian.org/debian bookworm main"),
            format!("deb {opts} http://deb.debian.org/debian bookworm-updates main"),
            format!("deb {opts} http://deb.debian.org/debian-security bookworm-security main"),
        ]
    );
}

#[test]
fn bullseye_apt_conf() {
    let conf = apt_conf(
        Path::new("/var/cache/sockwatch-vm/apt-bullseye"),
        Arch::X86_64,
    );
    for line in [
        "Dir::Etc::sourcelist \"/var/cache/sockwatch-vm/apt-bullseye/sources.list\";",
        "Dir::Etc::sourceparts \"/dev/null\";",
        "Dir::State::Lists \"/var/cache/sockwatch-vm/apt-bullseye/lists\";",
        "Dir::Cache \"/var/cache/sockwatch-vm/apt-bullseye/cache\";",
        "APT::Architecture \"amd64\";",
        "APT::Architectures:: \"amd64\";",
        "#clear APT::Update::Post-Invoke-Success;",
    ] {
        assert!(conf.lines().any(|l| l == line), "{line} in\n{conf}");
    }
}

#[test]
fn bookworm_arm64_apt_conf() {
    let dir = "/var/cache/sockwatch-vm/apt-bookworm-arm64";
    let conf = apt_conf(Path::new(dir), Arch::Aarch64);
    // The machine's own architectures are cleared before arm64 becomes the only one.
    let arch_lines: Vec<_> = conf.lines().filter(|l| l.contains("APT::Arch")).collect();
    assert_eq!(
        arch_lines,
        [
            "APT::Architecture \"arm64\";",
            "#clear APT::Architectures;",
            "APT::Architectures:: \"arm64\";",
        ]
    );
    let lists = format!("Dir::State::Lists \"{dir}/lists\";");
    assert!(conf.lines().any(|l| l == lists), "{conf}");
}

#[test]
fn os_release_codename() {
    let text = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_ID=\"12\"\n\
                VERSION_CODENAME=bookworm\nID=debian\n";
    assert_eq!(
        os_release_field(text, "VERSION_CODENAME").as_deref(),
        Some("bookworm")
    );
    assert_eq!(
        os_release_field("VERSION_CODENAME=\"trixie\"\n", "VERSION_CODENAME").as_deref(),
        Some("trixie")
    );
    assert_eq!(
        os_release_field("VERSION_CODENAME=\n", "VERSION_CODENAME"),
        None
    );
    assert_eq!(os_release_field("ID=debian\n", "VERSION_CODENAME"), None);
}

#[test]
fn mirror_not_serving_a_package() {
    let message = "`apt-get -c /c/apt.conf download -qq linux-image-5.10.0-46-cloud-amd64-unsigned` \
        failed (exit status: 100): W: Download is performed unsandboxed as root as file \
        '/c/x.deb' couldn't be accessed by user '_apt'. - pkgAcquire::Run (13: Permission denied)\n\
        E: Failed to fetch http://mirror/debian-security/pool/updates/main/l/linux/\
        linux-image-5.10.0-46-cloud-amd64-unsigned_5.10.262-1_amd64.deb  404  Not Found \
        [IP: 192.0.2.1 80]";
    let why = apt_error(message);
    assert_eq!(
        why,
        "Failed to fetch http://mirror/debian-security/pool/updates/main/l/linux/\
         linux-image-5.10.0-46-cloud-amd64-unsigned_5.10.262-1_amd64.deb  404  Not Found \
         [IP: 192.0.2.1 80]"
    );
    assert!(not_served(&why));
    let offline = "Failed to fetch http://mirror/debian/pool/x.deb  Could not connect to \
                   mirror:80 (192.0.2.1), connection timed out";
    assert!(!not_served(offline));
    assert!(!not_served(
        "Unable to locate package linux-image-5.10.0-404-cloud"
    ));
}

#[test]
fn apt_errors_on_one_line() {
    assert_eq!(
        one_line("E: The repository does not have a Release file.\n\nE: Some index files failed\n"),
        "E: The repository does not have a Release file.; E: Some index files failed"
    );
    assert_eq!(
        apt_error(
            "`apt-get update -qq` failed (exit status: 100): E: The repository 'http://m/debian \
             bullseye Release' does not have a Release file.\nE: The repository \
             'http://m/debian bullseye-updates Release' does not have a Release file.\n"
        ),
        "The repository 'http://m/debian bullseye Release' does not have a Release file; \
         The repository 'http://m/debian bullseye-updates Release' does not have a Release file"
    );
    assert_eq!(
        apt_error("cannot start `apt-get`\ncaused by: gone"),
        "cannot start `apt-get`; caused by: gone"
    );
}

#[test]
fn upstream_version() {
    let k = Kernel {
        package: String::new(),
        version: "6.12.117-1~deb12u1".into(),
        arch: Arch::X86_64,
        vmlinuz: "/c/vmlinuz-6.12.117+deb12-cloud-amd64".into(),
        modules: Vec::new(),
    };
    assert_eq!(k.upstream(), "6.12.117");
    assert_eq!(k.release(), "6.12.117+deb12-cloud-amd64");
}
