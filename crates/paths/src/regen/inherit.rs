//! A forked child's regeneration starts in its parent's frames: the
//! parent's stream walked up to where it stood when it forked.

use super::{Access, Inherited, Program, RegenError};
use crate::trace_dir::{StreamKey, Trace};

impl Program<'_> {
    /// The frames a forked child starts with: its parent's (a stream of
    /// process image `image`, itself perhaps inherited `from` further
    /// up) where its stream stood when it forked, `before` being the
    /// parent's stream up to there.
    pub fn inherited(
        &self,
        image: usize,
        before: &[u8],
        from: Option<&Inherited>,
    ) -> Result<Inherited, RegenError> {
        let mut stack = from.map_or_else(Vec::new, |f| f.0.clone());
        self.walk(
            image,
            before,
            |_, _| {},
            None::<(&[u64], fn(Access))>,
            &mut stack,
        )?;
        // The parent forked in a call (to `fork`, or a function that
        // called it); a walk that ends elsewhere was not given the
        // parent's stream up to its fork.
        if !stack.last().is_some_and(|f| f.in_call) {
            return Err(RegenError {
                offset: before.len(),
                what: "the parent's stream does not stand in a call here".into(),
            });
        }
        // Registers the parent changed after it last recorded them were not
        // followed (the walk ran no ops): nothing is known of them.
        for f in stack.iter_mut() {
            f.regs = self.unknown_regs(f.function);
        }
        Ok(Inherited(stack))
    }

    /// [`Program::inherited`] for a stream of `trace`: `None` if it is not
    /// a forked child's (or its parent's stream cannot be walked up to the
    /// fork).
    pub fn inherited_in(&self, trace: &Trace, thread: StreamKey) -> Option<Inherited> {
        self.inherited_depth(trace, thread, 0)
    }

    fn inherited_depth(&self, trace: &Trace, thread: StreamKey, depth: u32) -> Option<Inherited> {
        let (parent, at) = trace.fork_origin(thread)?;
        let from = (depth < 64)
            .then(|| self.inherited_depth(trace, parent, depth + 1))
            .flatten();
        let stream = trace.stream(parent);
        let before = &stream[..at.min(stream.len())];
        self.inherited(parent.2 as usize, before, from.as_ref())
            .ok()
    }
}
