//! Smoke tests of the explorer on programs built in code (the RON corpus is tested from the root crate).

use cuorder_model::build::Builder;
use cuorder_model::profile::Profile;
use cuorder_model::program::*;
use cuorder_model::semantics::Semantics;
use cuorder_model::verdict::{Frequency, Problem};
use cuorder_sim::explore::{explore, Limits};

fn send_recv(grouped: bool, parity: bool) -> Program {
    let mut b = Builder::new("sendrecv", 2);
    let s0 = b.stream("s0", StreamKind::NonBlocking);
    let x = b.buffer("x", 2 << 30, MemSpace::Device, false);
    let y = b.buffer("y", 2 << 30, MemSpace::Device, false);
    for r in 0..2u32 {
        let peer = 1 - r;
        let st = StreamRef { rank: r, index: s0 };
        let send = OpKind::Send { comm: CommId(0), peer, buf: b.whole(r, x), stream: st };
        let recv = OpKind::Recv { comm: CommId(0), peer, buf: b.whole(r, y), stream: st };
        if grouped {
            b.op(r, 0, OpKind::GroupStart).op(r, 0, send).op(r, 0, recv).op(r, 0, OpKind::GroupEnd);
        } else if parity && r == 1 {
            b.op(r, 0, recv).op(r, 0, send);
        } else {
            b.op(r, 0, send).op(r, 0, recv);
        }
        b.op(r, 0, OpKind::StreamSynchronize { stream: st });
    }
    b.finish()
}

/// Send-first without a warm-up: under `portable` the first contact is not mirrored, which is undefined (N7, issue
/// 7: it crashed once and hung once on the H200 pair); every other built-in profile hangs in every execution.
#[test]
fn send_first_is_undefined_under_portable_and_deadlocks_in_every_execution_otherwise() {
    for name in Profile::BUILTIN {
        let p = send_recv(false, false);
        let prof = Profile::builtin(name).unwrap();
        let sem = Semantics::new(&p, &prof);
        let ex = explore(&sem, &Limits::default());
        assert!(!ex.findings.is_empty(), "{name}");
        if *name == "portable" {
            let Problem::Undefined(u) = &ex.findings[0].problem else { panic!("{name}: {:?}", ex.findings[0].problem) };
            assert_eq!(u.rule, cuorder_model::rule::Rule::N7);
            assert_eq!(ex.findings[0].frequency, Frequency::Always);
            continue;
        }
        let Problem::Deadlock(d) = &ex.findings[0].problem else { panic!("{name}: {:?}", ex.findings[0].problem) };
        assert!(d.is_cycle, "{name}: {d:#?}");
        assert_eq!(ex.findings[0].frequency, Frequency::Always);
        for e in &d.cycle {
            eprintln!("{}", e.text);
        }
    }
}

#[test]
fn grouped_and_parity_complete() {
    for (g, p) in [(true, false), (false, true)] {
        let prog = send_recv(g, p);
        for name in Profile::BUILTIN {
            let prof = Profile::builtin(name).unwrap();
            let sem = Semantics::new(&prog, &prof);
            let ex = explore(&sem, &Limits::default());
            assert!(ex.clean(), "grouped={g} parity={p} {name}: {:#?}", ex.findings);
            assert!(ex.completed_states > 0);
        }
    }
}
