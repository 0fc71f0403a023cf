//! Scratch: print a cover program's ops with the model's labels.
use cuorder_model::profile::Profile;
use cuorder_model::semantics::{OpLoc, Semantics};
fn main() {
    let seed: u64 = std::env::args().nth(1).unwrap().parse().unwrap();
    let p = cuorder_sim::cover::program(seed, &Default::default());
    let prof = Profile::portable();
    let sem = Semantics::new(&p, &prof);
    for (ti, t) in p.ranks[0].threads.iter().enumerate() {
        for i in 0..t.ops.len() {
            println!("{}", sem.op_label(OpLoc { thread: ti as u32, op: i as u32 }));
        }
    }
    for s in &p.ranks[0].streams { println!("stream {} {:?}", s.name, s.kind); }
    for b in &p.barriers { println!("barrier {:?}", b); }
}
