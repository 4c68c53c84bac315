//! The programs that record events: one event id for every traced function
//! and kind, chosen while the plan is applied (a pattern may match many
//! functions, and only the applier knows which).

use std::sync::Arc;
use weft_plan::{
    Action, Allocate, EventInfo, Exhausted, Expand, Expr, Guarded, PointKind, Primitive, Resolved,
    Strings,
};

/// `--trace fn:` and `entry:`: at an entry, an event with the first `args`
/// arguments (at most 6, the registers); at an exit, one with the return
/// value. Each function and kind gets its own event id.
#[derive(Debug)]
pub struct FunctionEvents {
    /// Arguments recorded at an entry.
    pub args: u8,
    /// Which of them are strings (their text is recorded).
    pub strings: Strings,
}

impl FunctionEvents {
    /// The action of a traced function's points.
    pub fn action(args: u8, strings: Strings) -> Action {
        Action::Expand(Arc::new(FunctionEvents { args, strings }))
    }
}

impl Expand for FunctionEvents {
    fn expand(
        &self,
        at: &Resolved<'_>,
        alloc: &mut dyn Allocate,
    ) -> Result<Vec<Guarded>, Exhausted> {
        let exit = at.kind == PointKind::Exit;
        let strings = if exit { Strings::NONE } else { self.strings };
        let payload: Vec<Expr> = if exit {
            vec![Expr::Ret]
        } else {
            (1..=self.args.min(6)).map(Expr::Arg).collect()
        };
        let id = alloc.event(EventInfo {
            module: at.module.to_string(),
            function: at.function.to_string(),
            kind: at.kind,
            args: payload.len() as u8,
            strings: strings.mask,
            binary: 0,
            names: Vec::new(),
        })?;
        Ok(emit(id, payload, strings))
    }
}

/// A USDT probe: an event named `PROVIDER:NAME` carrying its operands.
#[derive(Debug)]
pub struct ProbeEvent {
    /// `PROVIDER:NAME`.
    pub name: String,
    /// The values, computed at the probe's instruction.
    pub args: Vec<Expr>,
    /// Which of them are strings (their text is recorded).
    pub strings: Strings,
}

impl Expand for ProbeEvent {
    fn expand(
        &self,
        at: &Resolved<'_>,
        alloc: &mut dyn Allocate,
    ) -> Result<Vec<Guarded>, Exhausted> {
        let id = alloc.event(EventInfo {
            module: at.module.to_string(),
            function: self.name.clone(),
            kind: at.kind,
            args: self.args.len().min(weft_live::ring::MAX_ARGS) as u8,
            strings: self.strings.mask,
            binary: 0,
            names: Vec::new(),
        })?;
        Ok(emit(id, self.args.clone(), self.strings))
    }
}

fn emit(id: u32, values: Vec<Expr>, strings: Strings) -> Vec<Guarded> {
    vec![Guarded {
        predicate: None,
        primitive: Primitive::Emit(id, values, strings),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_plan::Tally;

    fn at(function: &str, kind: PointKind) -> Resolved<'_> {
        Resolved {
            module: "prog",
            function,
            kind,
            syscall: None,
            addr: None,
        }
    }

    #[test]
    fn every_function_and_kind_gets_its_own_event() {
        let strings = Strings {
            mask: 0b10,
            cap: 64,
            sized: 0,
            gathered: 0,
        };
        let trace = FunctionEvents { args: 3, strings };
        let mut ids = Tally::default();
        let entry = trace
            .expand(&at("open", PointKind::Entry), &mut ids)
            .unwrap();
        let exit = trace
            .expand(&at("open", PointKind::Exit), &mut ids)
            .unwrap();
        let other = trace
            .expand(&at("close", PointKind::Entry), &mut ids)
            .unwrap();
        let values = vec![Expr::Arg(1), Expr::Arg(2), Expr::Arg(3)];
        assert_eq!(entry, emit(0, values, strings));
        assert_eq!(exit, emit(1, vec![Expr::Ret], Strings::NONE));
        assert!(matches!(other[0].primitive, Primitive::Emit(2, ..)));
        assert_eq!(ids.events.len(), 3);
        assert_eq!((ids.events[0].args, ids.events[0].strings), (3, 0b10));
        assert_eq!((ids.events[1].args, ids.events[1].strings), (1, 0));
        assert_eq!(ids.events[2].function, "close");
    }

    #[test]
    fn probe_events_are_named_by_the_probe() {
        let probe = ProbeEvent {
            name: "python:function__entry".into(),
            args: vec![Expr::Reg(0), Expr::Const(7)],
            strings: Strings {
                mask: 1,
                cap: 32,
                sized: 0,
                gathered: 0,
            },
        };
        let mut ids = Tally::default();
        let program = probe
            .expand(&at("main+0x10", PointKind::Instruction(0x10)), &mut ids)
            .unwrap();
        assert_eq!(program, emit(0, probe.args.clone(), probe.strings));
        assert_eq!(ids.events[0].function, "python:function__entry");
        assert_eq!(ids.events[0].args, 2);
    }
}
