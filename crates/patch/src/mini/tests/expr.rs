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
