use super::*;

/// One type: name offset, kind, vlen, its type/size field, and the words that follow.
type Type<'a> = (u32, u32, u32, u32, &'a [u32]);

/// A BTF blob: types, then strings.
fn blob(types: &[Type], strings: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    for &(name, kind, vlen, ty, words) in types {
        for w in [name, (kind << 24) | vlen, ty].iter().chain(words) {
            t.extend(w.to_le_bytes());
        }
    }
    let mut b = vec![0x9f, 0xeb, 1, 0];
    for v in [
        24u32,
        0,
        t.len() as u32,
        t.len() as u32,
        strings.len() as u32,
    ] {
        b.extend(v.to_le_bytes());
    }
    b.extend(t);
    b.extend(strings);
    b
}

/// (name, kind, type/size field, the ids it refers to) of every type in `raw`, by id.
fn read(raw: &[u8]) -> Vec<(String, u32, u32, Vec<u32>)> {
    let blob = Blob::parse(raw).expect("a BTF blob");
    let records = blob.records().expect("well-formed records");
    records
        .iter()
        .map(|r| {
            let name = String::from_utf8_lossy(blob.name(r.name_off()).unwrap_or_default());
            let refs = subset::references(r)
                .into_iter()
                .map(|(_, id)| id)
                .collect();
            (name.into_owned(), r.kind(), r.ty(), refs)
        })
        .collect()
}

#[test]
fn function_prototypes_are_read_from_btf() {
    // 1: int; 2: proto(3 params); 3: func "vfs_unlink" -> 2; 4: proto(1); 5: "vfs_rename" -> 4
    let strings = b"\0int\0vfs_unlink\0vfs_rename\0";
    let raw = blob(
        &[
            (1, 1, 0, 4, &[0]),
            (0, 13, 3, 1, &[0; 6]),
            (5, 12, 0, 2, &[]),
            (0, 13, 1, 1, &[0; 2]),
            (16, 12, 0, 4, &[]),
        ],
        strings,
    );
    let types = Types::parse(&raw).expect("well-formed");
    assert_eq!(types.param_count("vfs_unlink"), Some(3));
    assert_eq!(types.param_count("vfs_rename"), Some(1));
    assert_eq!(types.param_count("vfs_link"), None);
    assert!(Types::parse(b"junk").is_none());
}

#[test]
fn the_subset_keeps_what_local_types_name_and_embed_and_cuts_pointers() {
    // Kernel: 1 int; 2 struct file {int f_mode; struct path f_path; struct inode *f_inode;};
    // 3 struct path {int a[4];}; 4 array of 1 indexed by 1; 5 ptr -> 6; 6 struct inode {int};
    // 7 struct unrelated {int}; 8 typedef file_t -> 2; 9 func "file" (not a root).
    let strings = b"\0int\0file\0f_mode\0path\0f_path\0inode\0f_inode\0unrelated\0a\0file_t\0";
    let name = |n: &str| {
        let at = memchr::memmem::find(strings, format!("\0{n}\0").as_bytes()).unwrap();
        at as u32 + 1
    };
    let kernel = blob(
        &[
            (name("int"), 1, 0, 4, &[32]),
            (
                name("file"),
                4,
                3,
                24,
                &[
                    name("f_mode"),
                    1,
                    0,
                    name("f_path"),
                    3,
                    32,
                    name("f_inode"),
                    5,
                    128,
                ],
            ),
            (name("path"), 4, 1, 16, &[name("a"), 4, 0]),
            (0, 3, 0, 0, &[1, 1, 4]),
            (0, 2, 0, 6, &[]),
            (name("inode"), 4, 1, 4, &[name("a"), 1, 0]),
            (name("unrelated"), 4, 1, 4, &[name("a"), 1, 0]),
            (name("file_t"), 8, 0, 2, &[]),
            (name("file"), 12, 0, 0, &[]),
        ],
        strings,
    );
    // The object relocates `struct file___new` only.
    let local = blob(&[(1, 4, 0, 0, &[])], b"\0file___new\0");
    let cut = Types::parse(&kernel)
        .and_then(|t| t.relocation_subset(&local))
        .expect("a subset");
    assert_eq!(
        read(&cut),
        vec![
            ("int".into(), 1, 4, vec![]),
            ("file".into(), 4, 24, vec![1, 3, 5]),
            ("path".into(), 4, 16, vec![4]),
            ("".into(), 3, 0, vec![1, 1]),
            ("".into(), 2, 0, vec![]),
        ],
        "inode (behind a pointer), unrelated, the typedef and the function are cut"
    );
    assert_eq!(
        &cut[cut.len() - strings.len()..],
        strings,
        "strings unchanged"
    );
}

#[test]
fn the_subset_of_junk_is_none() {
    assert!(Types::parse(b"junk").is_none());
    let truncated = &blob(&[(0, 4, 2, 8, &[0, 0, 0])], b"\0")[..];
    assert!(
        Types::parse(truncated).is_none(),
        "a record runs past the section"
    );
    let kernel = blob(&[(1, 1, 0, 4, &[0])], b"\0int\0");
    let types = Types::parse(&kernel).expect("well-formed");
    assert_eq!(types.relocation_subset(b"junk"), None);
}
