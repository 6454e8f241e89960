use std::{cmp::Ordering, path::Path};

use clap::ValueEnum as _;

use super::{
    apt_message::{apt_error, not_served, one_line},
    cache::Kernel,
    series::{Origin, Series},
    sources::{Mirrors, apt_conf, os_release_field, sources_list},
    version::version_cmp,
};

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
        Series::V5_10.pattern(),
        r"^linux-image-5\.10\.0-[0-9]+-cloud-amd64-unsigned$"
    );
    assert_eq!(Series::V5_10.origin(), Origin::Release("bullseye"));
    assert_eq!(Series::V6_1.origin(), Origin::Host);
    assert_eq!(Series::V6_12.origin(), Origin::Host);
    for s in Series::ALL {
        let parsed = Series::from_str(&s.to_string(), false).expect("clap value");
        assert_eq!(parsed, s);
    }
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

#[test]
fn bullseye_sources_list() {
    let mirrors = Mirrors {
        archive: "http://deb.debian.org/debian".into(),
        security: Some("http://deb.debian.org/debian-security".into()),
    };
    let opts = "[arch=amd64 target=Packages \
                signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]";
    let entries: Vec<_> = sources_list("bullseye", &mirrors)
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
        &Mirrors {
            security: None,
            ..mirrors
        },
    );
    assert!(!without_security.contains("security"));
    assert!(without_security.ends_with("bullseye-updates main\n"));
}

#[test]
fn bullseye_apt_conf() {
    let conf = apt_conf(Path::new("/var/cache/sockwatch-vm/apt-bullseye"));
    for line in [
        "Dir::Etc::sourcelist \"/var/cache/sockwatch-vm/apt-bullseye/sources.list\";",
        "Dir::Etc::sourceparts \"/dev/null\";",
        "Dir::State::Lists \"/var/cache/sockwatch-vm/apt-bullseye/lists\";",
        "Dir::Cache \"/var/cache/sockwatch-vm/apt-bullseye/cache\";",
        "#clear APT::Update::Post-Invoke-Success;",
    ] {
        assert!(conf.lines().any(|l| l == line), "{line} in\n{conf}");
    }
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
        vmlinuz: "/c/vmlinuz-6.12.117+deb12-cloud-amd64".into(),
        modules: Vec::new(),
    };
    assert_eq!(k.upstream(), "6.12.117");
    assert_eq!(k.release(), "6.12.117+deb12-cloud-amd64");
}
