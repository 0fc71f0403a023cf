//! GPU tests of the hardware executor: run the smoke programs through the `cuorder-hw` binary and check what they
//! observed. On a machine without a GPU (or with too few) each test says that it skipped and passes.
//! `CUORDER_HW_TEST_BIG=1` adds the 2 GiB send-first programs (the ungrouped one must not complete).

use cuorder_hw::observation::{Observation, OpId, Outcome, Seen, Version};
use cuorder_hw::smoke;
use cuorder_hw::supervisor::check_gpus;
use std::path::PathBuf;
use std::process::Command;

fn gpus_or_skip(test: &str, needed: usize) -> bool {
    match check_gpus(needed) {
        Ok(_) => true,
        Err(e) => {
            println!("skipped {test}: {e}");
            false
        }
    }
}

fn run(p: &cuorder_model::program::Program, timeout_s: u64) -> Observation {
    let dir = std::env::temp_dir().join(format!("cuorder-hw-gpu-test-{}-{}", std::process::id(), p.name));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join(format!("{}.ron", p.name));
    std::fs::write(&prog, smoke::to_ron(p)).unwrap();
    let out: PathBuf = dir.join("trace.ron");
    // CUORDER_HW_BIN: the binary when this test runs on another machine than the one that built it.
    let bin = std::env::var("CUORDER_HW_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_cuorder-hw").to_string());
    let res = Command::new(bin)
        .arg("run")
        .arg(&prog)
        .arg("--out")
        .arg(&out)
        .args(["--timeout-s", &timeout_s.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&res.stdout);
    let stderr = String::from_utf8_lossy(&res.stderr);
    eprintln!("{stdout}\n{stderr}");
    assert!(res.status.success(), "cuorder-hw run failed: {}", res.status);
    Observation::from_ron(&std::fs::read_to_string(&out).unwrap()).unwrap()
}

fn op(rank: u32, index: u32) -> OpId {
    OpId { rank, thread: 0, index }
}

fn seen(o: &Observation, reader: OpId) -> Seen {
    o.reads_of(reader).next().unwrap_or_else(|| panic!("no read by {reader}")).seen.clone()
}

#[test]
fn single_gpu_kernel_write_read() {
    if !gpus_or_skip("single_gpu_kernel_write_read", 1) {
        return;
    }
    let o = run(&smoke::kernel_write_read(), 20);
    assert_eq!(o.outcome, Outcome::Completed, "{o:?}");
    assert_eq!(seen(&o, op(0, 3)), Seen::Uniform(Version::Op(op(0, 0))));
    assert_eq!(seen(&o, op(0, 7)), Seen::Uniform(Version::Op(op(0, 0))));
    assert_eq!(seen(&o, op(0, 9)), Seen::Uniform(Version::Op(op(0, 8))));
    assert!(o.ops.iter().all(|x| x.finished == Some(true)), "{:#?}", o.ops);
}

#[test]
fn two_gpus_grouped_sendrecv() {
    if !gpus_or_skip("two_gpus_grouped_sendrecv", 2) {
        return;
    }
    let o = run(&smoke::sendrecv_grouped(1 << 20, "sendrecv_grouped_1mib"), 20);
    assert_eq!(o.outcome, Outcome::Completed, "{o:?}");
    for r in 0..2 {
        assert_eq!(seen(&o, op(r, 5)), Seen::Uniform(Version::Op(op(1 - r, 0))));
    }
}

#[test]
fn two_gpus_send_first_2gib_hangs_and_grouped_completes() {
    if std::env::var("CUORDER_HW_TEST_BIG").as_deref() != Ok("1") {
        println!("skipped two_gpus_send_first_2gib: set CUORDER_HW_TEST_BIG=1");
        return;
    }
    if !gpus_or_skip("two_gpus_send_first_2gib", 2) {
        return;
    }
    // Non-mirrored ungrouped first contact (N7) is undefined: NCCL 2.28.3 on the 2 x H200 host failed with an
    // illegal memory access (hw/README.md); a hang is the other outcome seen. It must not complete.
    let o = run(&smoke::send_first_then_recv(2 << 30, false, "send_first_2gib"), 20);
    assert!(!matches!(o.outcome, Outcome::Completed), "{:?}", o.outcome);
    let o = run(&smoke::send_first_then_recv(2 << 30, true, "send_first_2gib_grouped"), 20);
    assert_eq!(o.outcome, Outcome::Completed);
}
