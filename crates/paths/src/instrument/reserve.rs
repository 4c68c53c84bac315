//! Function ids and resume place numbers, taken in the function table
//! before a copy is laid out and given back when its layout fails.

use super::{FunctionInfo, PathsInstrument, Role, Table};
use weft_plan::Rebuilding;

/// A function's id and resume place ids, taken before its layout.
pub(super) struct Reserved {
    pub(super) id: u32,
    /// The id, if another process (or image) traced the function first.
    pub(super) known: Option<u32>,
    /// The resume place ids it had there.
    pub(super) earlier: Vec<u32>,
    /// The first of the resume place ids taken for it.
    pub(super) first_resume: u32,
    /// Whether the function is traced (it records, and took its id).
    pub(super) taken: bool,
}

impl PathsInstrument {
    /// Takes `f`'s id and `resume_places` resume place ids, under the
    /// table's lock: the same code under another name (an alias) is one
    /// function, refused a second time in a process; the same file in
    /// another process gets its function's id and resume places again. A
    /// new traced function's entry is held by a placeholder until its
    /// layout is done ([`PathsInstrument::unreserve`] if it fails).
    pub(super) fn reserve(
        &self,
        f: &Rebuilding<'_>,
        place: &(String, u64),
        role: Role,
        resume_places: usize,
    ) -> Result<Reserved, String> {
        let mut table = self
            .table
            .lock()
            .map_err(|_| "the function table is poisoned".to_string())?;
        let Table {
            functions,
            resumes: next_resume,
            by_place,
            applied,
            images,
            current,
        } = &mut *table;
        if let Some(image) = current.get(&f.pid).and_then(|&i| images.get_mut(i)) {
            if !image.modules.iter().any(|(p, _)| *p == place.0) {
                image.modules.push((place.0.clone(), f.bias));
            }
        }
        let known = by_place.get(place).copied();
        if known.is_some_and(|id| applied.contains(&(f.pid, id))) {
            return Err("traced already under another name".into());
        }
        // A function whose copy found no room before keeps its id (copies
        // laid out since may hold the ids after it) and gets its entry now.
        let retry = known.filter(|&id| functions[id as usize].blocks.is_empty());
        if role != Role::Traced {
            // It records nothing: no id, no place in the table.
            return Ok(Reserved {
                id: 0,
                known: None,
                earlier: Vec::new(),
                first_resume: 0,
                taken: false,
            });
        }
        let (id, earlier, first_resume) = match (known, retry) {
            (Some(id), Some(_)) => {
                let first = *next_resume;
                *next_resume += resume_places as u32;
                (id, Vec::new(), first)
            }
            (Some(id), None) => (
                id,
                functions[id as usize]
                    .resumes
                    .iter()
                    .map(|r| r.id)
                    .collect(),
                *next_resume,
            ),
            (None, _) => {
                let id = functions.len() as u32;
                functions.push(FunctionInfo {
                    id,
                    module: f.module.to_string(),
                    path: place.0.clone(),
                    name: f.function.to_string(),
                    vaddr: place.1,
                    blocks: Vec::new(),
                    entry: 0,
                    edges: Vec::new(),
                    resumes: Vec::new(),
                    part_exits: Vec::new(),
                    data: None,
                });
                by_place.insert(place.clone(), id);
                let first = *next_resume;
                *next_resume += resume_places as u32;
                (id, Vec::new(), first)
            }
        };
        applied.insert((f.pid, id));
        Ok(Reserved {
            id,
            known: known.filter(|_| retry.is_none()),
            earlier,
            first_resume,
            taken: true,
        })
    }

    /// Gives back what [`PathsInstrument::reserve`] took for a function
    /// whose layout failed: `again`, for want of room (the applier tries
    /// it again elsewhere, and it keeps its id); or for good. A new
    /// function's id stays taken either way (copies laid out meanwhile hold
    /// the ids after it), by an entry with no blocks until its copy is
    /// placed, which no record names.
    pub(super) fn unreserve(
        &self,
        f: &Rebuilding<'_>,
        place: &(String, u64),
        reserved: &Reserved,
        again: bool,
    ) {
        if !reserved.taken {
            return;
        }
        if let Ok(mut t) = self.table.lock() {
            t.applied.remove(&(f.pid, reserved.id));
            if reserved.known.is_none() && !again {
                t.by_place.remove(place);
            }
        }
    }
}
