//! The kernel types CO-RE relocation can read, as a BTF blob of their own. aya looks for each
//! relocated local type's candidates by scanning every kernel type (about 125,000 on 6.18),
//! once per local type: 1.2 s of each start under emulation. Relocation only ever reads the
//! types named like a local type and what they embed, so aya is handed those alone,
//! renumbered, with the kernel's string table unchanged.
use std::{
    collections::{HashSet, VecDeque},
    iter,
};

use super::{
    Blob, HEADER_LEN, KIND_ARRAY, KIND_FUNC_PROTO, KIND_PTR, KIND_RESTRICT, KIND_STRUCT,
    KIND_TYPE_TAG, KIND_TYPEDEF, KIND_UNION, MAGIC, Record, Types,
};

impl Types<'_> {
    /// The subset of these (the kernel's) types that relocating an object with BTF `local`
    /// reads: every type named as a local type is (flavour suffixes `___x` aside), and every
    /// type those reach through members, array elements, typedefs and modifiers. Pointers are
    /// the cut: a field relocation never reads through one, and two pointers are compatible
    /// fields whatever they point to, so pointers in the subset point to `void`. Type ids
    /// change, so the subset serves relocations of field offsets, sizes and existence, and
    /// type existence and sizes (all the shim's), not the kernel type ids of
    /// `bpf_core_type_id_kernel`. `None` when `local` is malformed.
    pub fn relocation_subset(&self, local: &[u8]) -> Option<Vec<u8>> {
        let local = Blob::parse(local)?;
        let wanted: HashSet<&[u8]> = local
            .records()?
            .iter()
            .filter_map(|r| local.name(r.name_off()))
            .filter(|n| !n.is_empty())
            .map(flavorless)
            .collect();
        let kept = reachable(&self.records, |r| {
            relocatable(r.kind())
                && self
                    .blob
                    .name(r.name_off())
                    .is_some_and(|n| wanted.contains(flavorless(n)))
        });
        Some(write(&self.records, &kept, self.blob.strings))
    }
}

/// `name` without its CO-RE flavour (`task_struct___old` is `task_struct`).
fn flavorless(name: &[u8]) -> &[u8] {
    name.windows(3)
        .position(|w| w == b"___")
        .map_or(name, |at| &name[..at])
}

/// Kinds a relocation's root can be: not functions, variables, sections or declaration tags.
fn relocatable(kind: u32) -> bool {
    !matches!(kind, 12..=15 | 17)
}

/// The type ids a record refers to, with where each sits in the record; a pointer's target is
/// left out (see [`Types::relocation_subset`]).
pub(super) fn references(r: &Record) -> Vec<(usize, u32)> {
    let offsets: Vec<usize> = match r.kind() {
        KIND_ARRAY => vec![12, 16],
        KIND_STRUCT | KIND_UNION => (0..r.vlen()).map(|i| 12 + 12 * i + 4).collect(),
        KIND_FUNC_PROTO => iter::once(8)
            .chain((0..r.vlen()).map(|i| 12 + 8 * i + 4))
            .collect(),
        KIND_TYPEDEF..=KIND_RESTRICT | KIND_TYPE_TAG => vec![8],
        _ => Vec::new(),
    };
    offsets.into_iter().map(|o| (o, r.field(o))).collect()
}

/// Whether each type id (index `id - 1`) is a root or reached from one.
fn reachable(records: &[Record], root: impl Fn(&Record) -> bool) -> Vec<bool> {
    let mut kept: Vec<bool> = records.iter().map(&root).collect();
    let mut queue: VecDeque<usize> = (0..records.len()).filter(|&i| kept[i]).collect();
    while let Some(i) = queue.pop_front() {
        for (_, id) in references(&records[i]) {
            let Some(j) = (id as usize).checked_sub(1) else {
                continue;
            };
            if j < records.len() && !kept[j] {
                kept[j] = true;
                queue.push_back(j);
            }
        }
    }
    kept
}

/// The kept records in their kernel order, renumbered from 1, then the kernel's strings.
fn write(records: &[Record], kept: &[bool], strings: &[u8]) -> Vec<u8> {
    let mut new_id = vec![0u32; records.len() + 1];
    let mut next = 0;
    for (i, _) in kept.iter().enumerate().filter(|(_, k)| **k) {
        next += 1;
        new_id[i + 1] = next;
    }
    let mut types = Vec::new();
    for (r, _) in records.iter().zip(kept).filter(|(_, k)| **k) {
        let mut bytes = r.0.to_vec();
        if r.kind() == KIND_PTR {
            bytes[8..12].copy_from_slice(&0u32.to_le_bytes());
        }
        for (at, id) in references(r) {
            let renumbered = new_id.get(id as usize).copied().unwrap_or(0);
            bytes[at..at + 4].copy_from_slice(&renumbered.to_le_bytes());
        }
        types.extend(bytes);
    }
    let mut out = Vec::with_capacity(HEADER_LEN as usize + types.len() + strings.len());
    out.extend(MAGIC.to_le_bytes());
    out.extend([1, 0]); // version, flags
    let type_len = types.len() as u32;
    for field in [HEADER_LEN, 0, type_len, type_len, strings.len() as u32] {
        out.extend(field.to_le_bytes());
    }
    out.extend(types);
    out.extend(strings);
    out
}
