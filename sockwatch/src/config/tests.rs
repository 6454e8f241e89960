use super::*;

fn parse_str(text: &str) -> Result<Config, String> {
    parse(text, Path::new("/etc/sockwatch.toml")).map_err(|e| e.to_string())
}

#[test]
fn full_file() {
    let c = parse_str(
        r#"
listen = "127.0.0.1:9469"
scan_interval = "30s"
drain_interval = "20ms"
takeover_window = "500ms"
require_all_hooks = true
live_capacity = 4096
api_remote = true
events_filter = "verdicts"
events_file_mode = "0640"
log_format = "json"

[[watches]]
name = "multus"
path = "/run/multus"

[[watches]]
path = "/var/run/crio"
"#,
    )
    .expect("parses");
    assert_eq!(c.listen, Some("127.0.0.1:9469".parse().expect("addr")));
    assert_eq!(c.scan_interval, Duration::from_secs(30));
    assert_eq!(c.drain_interval, Duration::from_millis(20));
    assert_eq!(c.takeover_window, Duration::from_millis(500));
    assert!(c.require_all_hooks);
    assert_eq!(c.live_capacity, 4096);
    assert!(c.api_remote);
    assert_eq!(c.events_filter, EventsFilter::Verdicts);
    assert_eq!(c.events_file_mode, EventsFileMode::GroupReadable);
    assert_eq!(c.log_format, Some(LogFormat::Json));
    assert_eq!(
        c.watches,
        vec![
            WatchConfig {
                name: "multus".into(),
                path: "/run/multus".into(),
                guard: Default::default(),
            },
            WatchConfig {
                name: "crio".into(),
                path: "/var/run/crio".into(),
                guard: Default::default(),
            },
        ]
    );
}

#[test]
fn empty_file_is_the_defaults() {
    assert_eq!(parse_str("").expect("parses"), Config::default());
}

#[test]
fn errors_name_the_field_and_the_problem() {
    let cases = [
        (
            "[[watches]]\npath = \"/run/a\"\n[[watches]]\npath = \"run/b\"\n",
            "config /etc/sockwatch.toml: watches[1].path: must be absolute",
        ),
        (
            "[[watches]]\npaht = \"/run/a\"\n",
            "config /etc/sockwatch.toml: watches[0].paht: unknown field `paht`, expected one of `name`, `path`, `guard`",
        ),
        (
            "lisen = \":9469\"\n",
            "config /etc/sockwatch.toml: lisen: unknown field `lisen`, expected one of `watches`,",
        ),
        (
            "[[watches]]\npath = 5\n",
            "config /etc/sockwatch.toml: watches[0].path: invalid type: integer `5`",
        ),
        (
            "listen = \"localhost:http\"\n",
            "config /etc/sockwatch.toml: listen: `localhost:http` is not an address",
        ),
        (
            "scan_interval = \"10\"\n",
            "config /etc/sockwatch.toml: scan_interval: `10` has no unit after `10`",
        ),
        (
            "scan_interval = \"10 fortnights\"\n",
            "config /etc/sockwatch.toml: scan_interval: `10 fortnights`: unknown unit",
        ),
        (
            "drain_interval = \"5s\"\n",
            "config /etc/sockwatch.toml: drain_interval: 5s is out of range",
        ),
        (
            "live_capacity = 8\n",
            "config /etc/sockwatch.toml: live_capacity: 8 entries, want 16 to 1048576",
        ),
        (
            "live_capacity = -1\n",
            "config /etc/sockwatch.toml: live_capacity: invalid value",
        ),
        (
            "events_filter = \"events\"\n",
            "config /etc/sockwatch.toml: events_filter: unknown variant `events`, expected `verdicts` or `all`",
        ),
        (
            "events_file_mode = \"0644\"\n",
            "config /etc/sockwatch.toml: events_file_mode: `0644` is no events file mode: 0600 (owner only) or 0640 (and its group)",
        ),
        (
            "events_file_mode = 0o640\n",
            "config /etc/sockwatch.toml: events_file_mode: invalid type: integer `416`, expected a string",
        ),
        (
            "takeover_window = \"2m\"\n",
            "config /etc/sockwatch.toml: takeover_window: 120s is out of range: must be between 0ns and 60s",
        ),
        (
            "[[watches]]\nname = \"a\"\npath = \"/run/a\"\n[[watches]]\nname = \"a\"\npath = \"/run/b\"\n",
            "config /etc/sockwatch.toml: watches[1].name: `a` is already the name of watches[0]",
        ),
        (
            "[[watches]]\nname = \"x y\"\npath = \"/run/a\"\n",
            "config /etc/sockwatch.toml: watches[0].name: `x y` may only contain",
        ),
        (
            "[[watches]]\nname = \"none\"\npath = \"/run/a\"\n",
            "config /etc/sockwatch.toml: watches[0].name: `none` is reserved",
        ),
        (
            "[[watches]]\npath = \"/run/../etc\"\n",
            "config /etc/sockwatch.toml: watches[0].path: must not contain",
        ),
        ("listen = [\n", "config /etc/sockwatch.toml: line 1, column"),
    ];
    for (text, want) in cases {
        let got = parse_str(text).expect_err(text);
        assert!(
            got.starts_with(want),
            "{text:?}:\n got: {got}\nwant: {want}…"
        );
    }
}

#[test]
fn unreadable_file_is_named() {
    let e = load(Path::new("/nonexistent/sockwatch.toml"))
        .expect_err("missing")
        .to_string();
    assert!(e.starts_with("config /nonexistent/sockwatch.toml: "), "{e}");
}

#[test]
fn too_many_watches() {
    let mut text = String::new();
    for i in 0..=MAX_WATCHES {
        text.push_str(&format!("[[watches]]\npath = \"/run/w{i}\"\n"));
    }
    let e = parse_str(&text).expect_err("too many");
    assert!(e.contains("watches: 63 watches, at most 62"), "{e}");
}

#[test]
fn flags_override_the_file() {
    let file = parse_str("listen = \":9000\"\n[[watches]]\npath = \"/run/a\"\n").expect("ok");
    let merged = file
        .clone()
        .merge(Overrides {
            watches: vec!["m=/run/multus".parse().expect("watch")],
            listen: Some("127.0.0.1:9469".parse().expect("addr")),
            scan_interval: Some(Duration::from_secs(5)),
            drain_interval: None,
            takeover_window: Some(Duration::from_millis(300)),
            require_all_hooks: true,
            live_capacity: Some(16),
            api_remote: true,
            events_filter: Some(EventsFilter::Verdicts),
            events_file_mode: Some(EventsFileMode::GroupReadable),
            guard: Some(GuardPolicy::Foreign),
            guard_mode: Some(GuardMode::Audit),
        })
        .expect("valid");
    assert_eq!(merged.guard.policy, GuardPolicy::Foreign);
    assert_eq!(merged.guard_mode, GuardMode::Audit);
    assert_eq!(merged.watches[0].name, "m");
    assert_eq!(merged.listen, Some("127.0.0.1:9469".parse().expect("addr")));
    assert_eq!(merged.scan_interval, Duration::from_secs(5));
    assert_eq!(merged.drain_interval, DEFAULT_DRAIN_INTERVAL);
    assert_eq!(merged.takeover_window, Duration::from_millis(300));
    assert!(merged.require_all_hooks && !file.require_all_hooks);
    assert_eq!(merged.live_capacity, 16);
    assert!(merged.api_remote && !file.api_remote);
    assert_eq!(merged.events_filter, EventsFilter::Verdicts);
    assert_eq!(merged.events_file_mode, EventsFileMode::GroupReadable);
    // Nothing set: the file stands.
    assert_eq!(
        file.clone().merge(Overrides::default()).expect("valid"),
        file
    );
    let e = file
        .merge(Overrides {
            watches: vec![
                "a=/run/a".parse().expect("w"),
                "a=/run/b".parse().expect("w"),
            ],
            ..Overrides::default()
        })
        .expect_err("duplicate")
        .to_string();
    assert_eq!(
        e,
        "config flags: watches[1].name: `a` is already the name of watches[0]"
    );
}

#[test]
fn watch_flag_syntax() {
    let w: WatchConfig = "/run/multus".parse().expect("path only");
    assert_eq!(
        (w.name.as_str(), w.path.as_path()),
        ("multus", Path::new("/run/multus"))
    );
    let w: WatchConfig = "cni=/run/multus".parse().expect("named");
    assert_eq!(w.name, "cni");
    assert_eq!(w.to_string(), "cni=/run/multus");
    // A path with '=' in a component is still a path.
    let w: WatchConfig = "/run/a=b".parse().expect("path with =");
    assert_eq!(w.path, Path::new("/run/a=b"));
    assert_eq!(w.name, "a_b");
    assert!("relative/dir".parse::<WatchConfig>().is_err());
    assert!(
        "/".parse::<WatchConfig>()
            .expect_err("no name")
            .contains("set a name")
    );
}

#[test]
fn listen_forms() {
    assert_eq!(parse_listen("9469"), Ok(DEFAULT_LISTEN));
    assert_eq!(parse_listen(":9469"), Ok(DEFAULT_LISTEN));
    assert_eq!(
        parse_listen("127.0.0.1:9469"),
        Ok("127.0.0.1:9469".parse().expect("addr"))
    );
    assert_eq!(
        parse_listen("[::1]:1"),
        Ok("[::1]:1".parse().expect("addr"))
    );
    assert!(parse_listen("99999").is_err());
    assert!(parse_listen("localhost:9469").is_err());
}

#[test]
fn a_zero_scan_interval_disables_sweeps() {
    let c = parse_str("scan_interval = \"0s\"\n").expect("zero is allowed");
    assert_eq!(c.scan_interval, Duration::ZERO);
    let e = parse_str("scan_interval = \"500ms\"\n").expect_err("too short");
    assert!(e.contains("scan_interval: 500ms is out of range"), "{e}");
}

#[test]
fn durations() {
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    assert!(parse_duration("s").is_err());
    assert!(parse_duration("-1s").is_err());
    assert!(parse_duration("1e400s").is_err());
    assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration("2s500ms"), Ok(Duration::from_millis(2500)));
    assert_eq!(
        parse_duration("1m30"),
        Err("`1m30` has no unit after `30`: write e.g. 500ms, 10s, 1m30s or 1h".into())
    );
    assert_eq!(
        parse_duration(""),
        Err("an empty duration: write e.g. 500ms, 10s, 1m30s or 1h".into())
    );
    assert!(parse_duration("1m-30s").is_err());
}

#[test]
fn watch_of_matches_components_deepest_first() {
    let c = Config {
        watches: vec![
            "run=/run".parse().expect("w"),
            "multus=/run/multus".parse().expect("w"),
        ],
        ..Config::default()
    };
    assert_eq!(c.watch_of("/run/multus/multus.sock"), "multus");
    assert_eq!(c.watch_of("/run/multus2/x.sock"), "run");
    assert_eq!(c.watch_of("/tmp/x.sock"), "");
    assert_eq!(c.watch_names().collect::<Vec<_>>(), ["run", "multus"]);
}

/// The example in deploy/ is a valid config.
#[test]
fn deploy_example_config_parses() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let cm =
        std::fs::read_to_string(dir.join("20-configmap.yaml")).expect("deploy/20-configmap.yaml");
    // The TOML is the block scalar under `sockwatch.toml: |`, indented by 4.
    let toml: String = cm
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("sockwatch.toml: |"))
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| format!("{}\n", l.get(4..).unwrap_or("")))
        .collect();
    let c = parse(&toml, Path::new("deploy/20-configmap.yaml")).expect("valid config");
    assert!(c.watches.is_empty(), "the default watches the whole node");
    assert_eq!(
        c.events_filter,
        EventsFilter::Verdicts,
        "a node's stream carries its verdicts, not every kernel event"
    );
    // The commented-out example is valid too.
    let example: String = toml
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest) if rest.starts_with("[[watches]]") || rest.contains(" = ") => rest,
            _ => l,
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let c = parse(&example, Path::new("example")).expect("valid example");
    assert_eq!(
        c.watch_names().collect::<Vec<_>>(),
        ["multus", "device-plugins"]
    );
}

#[test]
fn the_takeover_window_defaults_to_3s_and_may_be_zero() {
    assert_eq!(Config::default().takeover_window, Duration::from_secs(3));
    let c = parse_str("takeover_window = \"0s\"\n").expect("zero is allowed");
    assert!(c.takeover_window.is_zero());
}

#[test]
fn every_line_is_written_unless_the_filter_says_verdicts() {
    assert_eq!(Config::default().events_filter, EventsFilter::All);
    let c = parse_str("events_filter = \"verdicts\"\n").expect("parses");
    assert_eq!(c.events_filter, EventsFilter::Verdicts);
    let back = c
        .merge(Overrides {
            events_filter: Some(EventsFilter::All),
            ..Overrides::default()
        })
        .expect("valid");
    assert_eq!(back.events_filter, EventsFilter::All, "the flag wins");
}

#[test]
fn guard_settings_per_watch_fall_back_to_the_top_level() {
    let c = parse_str(
        r#"
guard = "stale_owner"
guard_allow_comms = ["kubelet"]
[[watches]]
path = "/run/multus"
[[watches]]
path = "/run/plugins"
guard = "foreign"
guard_allow_cgroups = ["/system.slice/kubelet.service"]
"#,
    )
    .expect("valid");
    let slots = c.guard_slots();
    assert_eq!(slots.len(), 3, "{slots:?}");
    assert_eq!(slots[0].policy, GuardPolicy::StaleOwner);
    assert_eq!(
        slots[1], slots[0],
        "a watch without guard keys takes the top level's"
    );
    assert_eq!(slots[2].policy, GuardPolicy::Foreign);
    assert_eq!(slots[2].allow_comms, vec!["kubelet".to_string()]);
    assert_eq!(
        slots[2].allow_cgroups,
        vec![PathBuf::from("/system.slice/kubelet.service")]
    );
    assert_eq!(Config::default().guard.policy, GuardPolicy::Off);
}

#[test]
fn the_guard_mode_is_enforce_unless_the_file_says_audit() {
    assert_eq!(Config::default().guard_mode, GuardMode::Enforce);
    let c = parse_str("guard = \"stale_owner\"\nguard_mode = \"audit\"\n").expect("valid");
    assert_eq!(c.guard_mode, GuardMode::Audit);
    let e = parse_str("guard_mode = \"warn\"\n").expect_err("unknown mode");
    assert!(
        e.starts_with("config /etc/sockwatch.toml: guard_mode: unknown variant `warn`"),
        "{e}"
    );
}

#[test]
fn bad_guard_settings_name_the_field() {
    let e = parse_str("guard = \"deny_all\"\n").expect_err("unknown policy");
    assert!(
        e.starts_with("config /etc/sockwatch.toml: guard: unknown variant `deny_all`"),
        "{e}"
    );
    let e = parse_str(
        "[[watches]]\npath = \"/run/a\"\nguard_allow_comms = [\"a-name-longer-than-15\"]\n",
    )
    .expect_err("long comm");
    assert!(
        e.contains("watches[0].guard_allow_comms[0]: `a-name-longer-than-15` is no command name"),
        "{e}"
    );
    let e = parse_str("guard_allow_cgroups = [\"system.slice/../x\"]\n").expect_err("relative");
    assert!(
        e.contains("guard_allow_cgroups[0]: `system.slice/../x` must be a cgroup path"),
        "{e}"
    );
}

#[test]
fn an_events_file_is_created_owner_only_unless_told_group_readable() {
    assert_eq!(Config::default().events_file_mode, EventsFileMode::Private);
    assert_eq!(EventsFileMode::Private.bits(), 0o600);
    assert_eq!(EventsFileMode::GroupReadable.bits(), 0o640);
    let c = parse_str("events_file_mode = \"640\"\n").expect("parses");
    assert_eq!(c.events_file_mode, EventsFileMode::GroupReadable);
    let back = c
        .merge(Overrides {
            events_file_mode: Some(EventsFileMode::Private),
            ..Overrides::default()
        })
        .expect("valid");
    assert_eq!(
        back.events_file_mode,
        EventsFileMode::Private,
        "the flag wins"
    );
    for m in EventsFileMode::ALL {
        assert_eq!(parse_events_file_mode(m.name()), Ok(m));
    }
    assert!(parse_events_file_mode("0666").is_err());
}

#[test]
fn a_missing_file_is_one_message_naming_it() {
    let e = load(Path::new("/nonexistent/sockwatch.toml")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "config /nonexistent/sockwatch.toml: No such file or directory"
    );
    assert!(std::error::Error::source(&e).is_none());
}

#[test]
fn an_unknown_log_format_names_the_key() {
    let e = parse_str("log_format = \"xml\"\n").unwrap_err();
    assert!(
        e.starts_with("config /etc/sockwatch.toml: log_format: unknown variant `xml`"),
        "{e}"
    );
}
