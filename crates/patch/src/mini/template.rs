//! Mini-trampolines assembled once per shape. A system call capture asks
//! for two mini-trampolines per `syscall` instruction, a thousand in a
//! process that loads the C library, and most differ only in the ids of
//! the events they write: assembling each (iced's assembler, about 100 µs)
//! was most of what an `exec` cost weft. A [`MiniTemplate`] is the code of
//! one shape, assembled with stand-in event ids, and copied for each
//! program of that shape with its own ids written over the stand-ins.
//!
//! A template is made only where copying is exact: the code assembled at
//! two different addresses must be the same bytes (every reference it
//! makes is to its own literals, relative, or absolute), and each stand-in
//! id must occur in it once.

use super::{assemble_mini, mini_trampoline, returns::Extra, Mini, ThreadTable};
use crate::Result;
use weft_plan::{Guarded, Primitive};

/// The first stand-in event id; emit `k` of a program gets `STAND_IN + k`.
const STAND_IN: u32 = 0x7eed_0000;

/// Two addresses far apart, where a template is assembled to see whether
/// its bytes depend on where they lie.
const TRIAL_AT: [u64; 2] = [0x1000_0000_0000, 0x2345_6780_0000];

/// The code of every program of one shape (see [`shape`]).
#[derive(Debug, Clone)]
pub struct MiniTemplate {
    bytes: Vec<u8>,
    /// Where each event id (see [`event_of`]) lies in `bytes`, 4 bytes each,
    /// in program order.
    ids_at: Vec<usize>,
    /// Where the point's call is made (see [`Mini::made_calls`]).
    made_calls: Vec<u64>,
}

/// The event id a primitive writes into the code: an emit's, and that of
/// the record a call kept open gets if left.
fn event_of(p: &Primitive) -> Option<u32> {
    match p {
        Primitive::Emit(id, ..) => Some(*id),
        Primitive::MakeCall { left: Some(left) } => Some(left.event),
        _ => None,
    }
}

/// `p` writing event `id` instead (see [`event_of`]).
fn with_event(p: &Primitive, id: u32) -> Primitive {
    match p {
        Primitive::Emit(_, values, strings) => Primitive::Emit(id, values.clone(), *strings),
        Primitive::MakeCall { left: Some(left) } => Primitive::MakeCall {
            left: Some(weft_plan::LeftCall { event: id, ..*left }),
        },
        other => other.clone(),
    }
}

/// `actions` with every event id replaced by a stand-in: the programs of
/// one shape share a [`MiniTemplate`].
pub fn shape(actions: &[Guarded]) -> Vec<Guarded> {
    let mut k = 0;
    actions
        .iter()
        .map(|g| match event_of(&g.primitive) {
            Some(_) => {
                let id = STAND_IN + k;
                k += 1;
                Guarded {
                    predicate: g.predicate.clone(),
                    primitive: with_event(&g.primitive, id),
                }
            }
            None => g.clone(),
        })
        .collect()
}

impl MiniTemplate {
    /// The template of `actions`' shape for a cluster whose thread table is
    /// `table`, or None where a copy would not be exact (the caller then
    /// assembles each program where it goes).
    pub fn new(table: ThreadTable, actions: &[Guarded]) -> Result<Option<MiniTemplate>> {
        let stand_ins = shape(actions);
        let Mini { bytes, made_calls } =
            assemble_mini(TRIAL_AT[0], table, &stand_ins, Extra::None)?;
        if mini_trampoline(TRIAL_AT[1], table, &stand_ins)? != bytes {
            return Ok(None);
        }
        let emits = stand_ins
            .iter()
            .filter(|g| event_of(&g.primitive).is_some())
            .count() as u32;
        let mut ids_at = Vec::new();
        for k in 0..emits {
            let id = (STAND_IN + k).to_le_bytes();
            let mut found = bytes
                .windows(4)
                .enumerate()
                .filter(|(_, w)| *w == id)
                .map(|(at, _)| at);
            match (found.next(), found.next()) {
                (Some(at), None) => ids_at.push(at),
                _ => return Ok(None),
            }
        }
        Ok(Some(MiniTemplate {
            bytes,
            ids_at,
            made_calls,
        }))
    }

    /// The code of `actions` (of this template's shape), wherever it
    /// goes, and where in it the point's call is made.
    pub fn mini_of(&self, actions: &[Guarded]) -> Mini {
        Mini {
            bytes: self.code_of(actions),
            made_calls: self.made_calls.clone(),
        }
    }

    /// The code of `actions` (of this template's shape), wherever it goes.
    pub fn code_of(&self, actions: &[Guarded]) -> Vec<u8> {
        let mut bytes = self.bytes.clone();
        let ids = actions.iter().filter_map(|g| event_of(&g.primitive));
        for (id, &at) in ids.zip(&self.ids_at) {
            bytes[at..at + 4].copy_from_slice(&id.to_le_bytes());
        }
        bytes
    }
}
