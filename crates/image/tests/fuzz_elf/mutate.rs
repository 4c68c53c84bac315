//! Mutations of real files: values written into fields, flipped bytes,
//! cuts.

use super::*;

/// A value written into a field.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    /// This number.
    Const(u64),
    /// The file's length plus this (near or past the end).
    NearEnd(i16),
    /// The field's own value plus this (1..8: misaligned).
    Nudge(u8),
}

/// One change to a real file; indexes are taken modulo what they index.
#[derive(Clone, Debug)]
pub(crate) enum Mutation {
    /// XOR a byte anywhere.
    Flip { at: usize, xor: u8 },
    /// XOR a byte inside one of the parsed sections.
    FlipIn { region: usize, at: usize, xor: u8 },
    /// Set a header, section, segment, note, symbol or descriptor field.
    Set { field: usize, value: Value },
}

pub(crate) fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => prop::sample::select(vec![
            0,
            1,
            3,
            0x40,
            0xff,
            0xffff,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_fff0,
            0xffff_ffff,
            0x1_0000_0000,
            1 << 62,
            1 << 63,
            u64::MAX - 7,
            u64::MAX,
        ])
        .prop_map(Value::Const),
        1 => any::<u64>().prop_map(Value::Const),
        1 => (-256i16..256).prop_map(Value::NearEnd),
        1 => (1u8..8).prop_map(Value::Nudge),
    ]
}

pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => (any::<usize>(), 1u8..=255).prop_map(|(at, xor)| Mutation::Flip { at, xor }),
        2 => (any::<usize>(), any::<usize>(), 1u8..=255)
            .prop_map(|(region, at, xor)| Mutation::FlipIn { region, at, xor }),
        4 => (any::<usize>(), value()).prop_map(|(field, value)| Mutation::Set { field, value }),
    ]
}

/// A real file, the changes to make, and the length to cut it to (a
/// fraction of its length, in 1/65536ths). Prints with what its indexes
/// stand for.
#[derive(Clone)]
pub(crate) struct Case {
    pub(crate) sample: usize,
    pub(crate) mutations: Vec<Mutation>,
    pub(crate) cut: Option<u16>,
}

pub(crate) fn case() -> impl Strategy<Value = Case> {
    (
        any::<usize>(),
        prop::collection::vec(mutation(), 1..6),
        prop::option::weighted(0.25, any::<u16>()),
    )
        .prop_map(|(sample, mutations, cut)| Case {
            sample,
            mutations,
            cut,
        })
}

impl Case {
    /// The sample's name and the mutated bytes.
    pub(crate) fn apply(&self) -> (&'static str, Vec<u8>) {
        let samples = samples();
        let s = &samples[self.sample % samples.len()];
        let mut bytes = s.bytes.clone();
        for m in &self.mutations {
            apply(s, &mut bytes, m);
        }
        if let Some(cut) = self.cut {
            bytes.truncate((bytes.len() as u64 * u64::from(cut) / 65536) as usize);
        }
        (&s.name, bytes)
    }
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let samples = samples();
        let s = &samples[self.sample % samples.len()];
        write!(f, "{}:", s.name)?;
        for m in &self.mutations {
            match *m {
                Mutation::Flip { at, xor } => {
                    write!(f, " byte {:#x} ^= {xor:#x};", at % s.bytes.len())?
                }
                Mutation::FlipIn { region, at, xor } if !s.regions.is_empty() => {
                    let (off, size) = s.regions[region % s.regions.len()];
                    write!(f, " byte {:#x} ^= {xor:#x};", off + at % size)?
                }
                Mutation::FlipIn { at, xor, .. } => {
                    write!(f, " byte {:#x} ^= {xor:#x};", at % s.bytes.len())?
                }
                Mutation::Set { field, ref value } => {
                    let field = &s.fields[field % s.fields.len()];
                    write!(f, " {} (at {:#x}) = {value:x?};", field.what, field.at)?
                }
            }
        }
        if let Some(cut) = self.cut {
            let len = s.bytes.len() as u64 * u64::from(cut) / 65536;
            write!(f, " cut to {len:#x} bytes")?;
        }
        Ok(())
    }
}

pub(crate) fn apply(s: &Sample, bytes: &mut [u8], m: &Mutation) {
    let len = bytes.len();
    match *m {
        Mutation::Flip { at, xor } => bytes[at % len] ^= xor,
        Mutation::FlipIn { region, at, xor } if !s.regions.is_empty() => {
            let (off, size) = s.regions[region % s.regions.len()];
            bytes[off + at % size] ^= xor;
        }
        Mutation::FlipIn { at, xor, .. } => bytes[at % len] ^= xor,
        Mutation::Set { field, ref value } => {
            let Field { at, width, .. } = s.fields[field % s.fields.len()];
            let old = le(bytes, at, width).unwrap_or(0);
            let v = match *value {
                Value::Const(v) => v,
                Value::NearEnd(d) => (len as u64).wrapping_add_signed(i64::from(d)),
                Value::Nudge(d) => old.wrapping_add(u64::from(d)),
            };
            bytes[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
        }
    }
}
