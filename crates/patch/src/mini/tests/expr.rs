//! Predicates and counter primitives.

use super::*;

#[test]
fn predicated_counters_on_arguments() {
    let mem = Memory::new(16);
    let exec = Exec::new(4096);
    let c0 = mem.counter(0);
    let c1 = mem.counter(1);
    let actions = vec![
        // c0 += arg3 when arg1 == 5 and arg2 > 10
        Guarded {
            predicate: Some(Expr::bin(
                BinOp::And,
                Expr::bin(BinOp::Eq, Expr::Arg(1), Expr::Const(5)),
                Expr::bin(BinOp::Gt, Expr::Arg(2), Expr::Const(10)),
            )),
            primitive: Primitive::AddCounter(c0, Expr::Arg(3)),
        },
        // c1 += (arg4 * 2 - 1) / arg5   (division by zero gives 0)
        Guarded {
            predicate: None,
            primitive: Primitive::AddCounter(
                c1,
                Expr::bin(
                    BinOp::Div,
                    Expr::bin(
                        BinOp::Sub,
                        Expr::bin(BinOp::Mul, Expr::Arg(4), Expr::Const(2)),
                        Expr::Const(1),
                    ),
                    Expr::Arg(5),
                ),
            ),
        },
    ];
    exec.load(&mini_trampoline(exec.addr(), mem.table(), &actions).unwrap());
    exec.call([5, 11, 7, 10, 3, 0]); // c0 += 7; c1 += 19/3 = 6
    exec.call([5, 10, 7, 10, 0, 0]); // predicate false; c1 += 19/0 = 0
    exec.call([4, 99, 7, 1, -1, 0]); // predicate false; c1 += 1/-1 = -1
    assert_eq!(mem.read(c0), 7);
    assert_eq!(mem.read(c1) as i64, 5);
}

/// Every comparison, as a predicate, against every form its right side
/// can take (a constant that fits an instruction, one that does not, a
/// value read in one instruction, an expression), and `and`/`or` of
/// them, count exactly the calls Rust's own comparison says hold.
#[test]
fn predicates_compare_as_signed_integers_whatever_their_right_side() {
    let ops = [
        (BinOp::Lt, (|a, b| a < b) as fn(i64, i64) -> bool),
        (BinOp::Gt, |a, b| a > b),
        (BinOp::Le, |a, b| a <= b),
        (BinOp::Ge, |a, b| a >= b),
        (BinOp::Eq, |a, b| a == b),
        (BinOp::Ne, |a, b| a != b),
    ];
    let big = 1i64 << 40;
    let values = [-big, -5, -1, 0, 3, 5, 7, big, big + 1];
    let mem = Memory::new(16);
    let exec = Exec::new(1 << 16);
    let mut actions = vec![];
    let mut expected = vec![];
    let mut k = 0;
    for (op, holds) in ops {
        for constant in [5, big] {
            let rights = [
                Expr::Const(constant),
                Expr::Arg(2),
                Expr::bin(BinOp::Add, Expr::Arg(2), Expr::Const(0)),
            ];
            for (form, right) in rights.into_iter().enumerate() {
                actions.push(Guarded {
                    predicate: Some(Expr::bin(op, Expr::Arg(1), right)),
                    primitive: Primitive::AddCounter(mem.counter(k), Expr::Const(1)),
                });
                let mut n = 0;
                for a in values {
                    for b in values {
                        let right_value = if form == 0 { constant } else { b };
                        n += holds(a, right_value) as u64;
                    }
                }
                expected.push(n);
                k += 1;
            }
        }
    }
    // arg1 < 5 and arg2 > 0; arg1 == arg2 or arg1 > 6.
    actions.push(Guarded {
        predicate: Some(Expr::bin(
            BinOp::And,
            Expr::bin(BinOp::Lt, Expr::Arg(1), Expr::Const(5)),
            Expr::bin(BinOp::Gt, Expr::Arg(2), Expr::Const(0)),
        )),
        primitive: Primitive::AddCounter(mem.counter(k), Expr::Const(1)),
    });
    actions.push(Guarded {
        predicate: Some(Expr::bin(
            BinOp::Or,
            Expr::bin(BinOp::Eq, Expr::Arg(1), Expr::Arg(2)),
            Expr::bin(BinOp::Gt, Expr::Arg(1), Expr::Const(6)),
        )),
        primitive: Primitive::AddCounter(mem.counter(k + 1), Expr::Const(1)),
    });
    let (mut and, mut or) = (0, 0);
    for a in values {
        for b in values {
            and += (a < 5 && b > 0) as u64;
            or += (a == b || a > 6) as u64;
        }
    }
    expected.extend([and, or]);
    exec.load(&mini_trampoline(exec.addr(), mem.table(), &actions).unwrap());
    for a in values {
        for b in values {
            exec.call([a, b, 0, 0, 0, 0]);
        }
    }
    let counted: Vec<u64> = (0..expected.len())
        .map(|k| mem.read(mem.counter(k)))
        .collect();
    assert_eq!(counted, expected);
}
