//! Just enough of the BTF format to read it raw: a function's parameter count, and the subset
//! of the kernel's types that CO-RE relocation reads ([`Types::relocation_subset`]).
//! Little-endian, as every kernel sockwatch runs on. The kernel's type section is walked once
//! ([`Types::parse`]): one walk is 2 ms natively for 125,000 types, tens under emulation.
mod subset;

const MAGIC: u16 = 0xeb9f;
const HEADER_LEN: u32 = 24;

const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_TYPEDEF: u32 = 8;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_TYPE_TAG: u32 = 18;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Bytes that follow a type's 12-byte header, by kind.
fn extra(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        1 | 14 | 17 => 4,             // int, var, decl tag
        3 => 12,                      // array
        4 | 5 | 15 | 19 => 12 * vlen, // struct, union, datasec, enum64
        6 | 13 => 8 * vlen,           // enum, func proto
        2 | 7..=12 | 16 | 18 => 0,    // ptr, fwd, typedef, modifiers, func, float, tag
        _ => return None,
    })
}

/// One type record: its 12-byte header and what follows it.
#[derive(Clone, Copy)]
struct Record<'a>(&'a [u8]);

impl Record<'_> {
    fn field(&self, at: usize) -> u32 {
        u32_at(self.0, at).unwrap_or(0)
    }
    fn name_off(&self) -> u32 {
        self.field(0)
    }
    fn kind(&self) -> u32 {
        (self.field(4) >> 24) & 0x1f
    }
    fn vlen(&self) -> usize {
        (self.field(4) & 0xffff) as usize
    }
    /// The `type` (or `size`) field of the header.
    fn ty(&self) -> u32 {
        self.field(8)
    }
}

/// A BTF blob's type and string sections.
struct Blob<'a> {
    types: &'a [u8],
    strings: &'a [u8],
}

impl<'a> Blob<'a> {
    fn parse(raw: &'a [u8]) -> Option<Self> {
        if raw.get(..2)? != MAGIC.to_le_bytes() {
            return None;
        }
        let section = |off_at: usize| -> Option<&'a [u8]> {
            let start = u32_at(raw, 4)? as usize + u32_at(raw, off_at)? as usize;
            raw.get(start..start + u32_at(raw, off_at + 4)? as usize)
        };
        Some(Self {
            types: section(8)?,
            strings: section(16)?,
        })
    }

    fn name(&self, off: u32) -> Option<&'a [u8]> {
        let rest = self.strings.get(off as usize..)?;
        rest.get(..rest.iter().position(|&c| c == 0)?)
    }

    /// Every type record, type id `n` at index `n - 1`; `None` when one is malformed.
    fn records(&self) -> Option<Vec<Record<'a>>> {
        let mut records = Vec::new();
        let mut at = 0;
        while at < self.types.len() {
            let header = Record(self.types.get(at..at + 12)?);
            let len = 12 + extra(header.kind(), header.vlen())?;
            records.push(Record(self.types.get(at..at + len)?));
            at += len;
        }
        Some(records)
    }
}

/// A raw BTF blob with its type records listed, for every question asked of it.
pub struct Types<'a> {
    blob: Blob<'a>,
    records: Vec<Record<'a>>,
}

impl<'a> Types<'a> {
    /// `None` when `raw` is not BTF or a record in it is malformed.
    pub fn parse(raw: &'a [u8]) -> Option<Self> {
        let blob = Blob::parse(raw)?;
        let records = blob.records()?;
        Some(Self { blob, records })
    }

    /// The parameter count of function `name`; `None` when there is no such function.
    pub fn param_count(&self, name: &str) -> Option<u16> {
        let func = self.records.iter().find(|r| {
            r.kind() == KIND_FUNC && self.blob.name(r.name_off()) == Some(name.as_bytes())
        })?;
        let proto = self.records.get((func.ty() as usize).checked_sub(1)?)?;
        (proto.kind() == KIND_FUNC_PROTO).then_some(proto.vlen() as u16)
    }
}

#[cfg(test)]
mod tests;
