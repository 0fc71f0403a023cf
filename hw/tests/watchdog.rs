//! The supervisor without a GPU: a shell script stands in for the rank processes, so that the watchdog, the SIGKILL
//! of every rank's process group, the reading of logs written before the kill, and failure reporting are tested on
//! any machine.

use cuorder_hw::observation::{Evidence, OpId, Outcome, ThreadAt};
use cuorder_hw::supervisor::{run, RunOptions};
use cuorder_model::build::Builder;
use cuorder_model::program::{OpKind, Program};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn program() -> Program {
    let mut b = Builder::new("sleepers", 2);
    for r in 0..2 {
        b.op(r, 0, OpKind::HostSleep { ns: 1_000 }).op(r, 0, OpKind::HostSleep { ns: 1_000 });
    }
    b.finish()
}

/// Writes a stand-in rank executable whose body runs after `LOG`, `RANK` and `WORK` are parsed from the arguments.
fn fake_rank(dir: &Path, body: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("fake-rank.sh");
    let script = format!(
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do case \"$1\" in --log) LOG=$2; shift;; --rank) RANK=$2; shift;; \
         --work-dir) WORK=$2; shift;; esac; shift; done\n{body}\n"
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn opts(dir: &Path, exe: PathBuf, timeout: Duration) -> RunOptions {
    RunOptions {
        timeout,
        setup_timeout: Duration::from_secs(20),
        rank_exe: Some(exe),
        work_dir: Some(dir.join("work")),
        skip_gpu_check: true,
        ..RunOptions::default()
    }
}

fn gone(pid: u32) -> bool {
    // Killed: no such process, or a zombie waiting for a parent that does not reap. SIGKILL is delivered
    // asynchronously, so give it up to 5 s.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let dead = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(s) => s.split(") ").nth(1).map(|r| r.starts_with('Z')).unwrap_or(false),
        };
        if dead || Instant::now() > deadline {
            return dead;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn watchdog_kills_every_rank_and_reports_where_threads_are() {
    let dir = std::env::temp_dir().join(format!("cuorder-hw-watchdog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Each rank finishes op 0, enters op 1 and blocks; a grandchild in the same process group blocks too.
    let exe = fake_rank(
        &dir,
        "echo 'Ready(ns:1)' >> \"$LOG\"\n\
         echo 'Enter(thread:0,op:0,ns:2)' >> \"$LOG\"\n\
         echo 'Return(thread:0,op:0,ns:3,query_ready:None)' >> \"$LOG\"\n\
         echo 'Enter(thread:0,op:1,ns:4)' >> \"$LOG\"\n\
         sleep 600 &\n echo $! > \"$WORK/grandchild.$RANK\"\n wait",
    );
    let started = Instant::now();
    let o = run(&program(), &opts(&dir, exe, Duration::from_millis(500))).unwrap();
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
    let Outcome::Hung { never_finished, threads } = &o.outcome else { panic!("{:?}", o.outcome) };
    assert_eq!(never_finished, &vec![OpId { rank: 0, thread: 0, index: 1 }, OpId { rank: 1, thread: 0, index: 1 }]);
    assert!(threads.iter().all(|t| t.at == ThreadAt::InOp(1)), "{threads:?}");
    let first = o.op(OpId { rank: 1, thread: 0, index: 0 }).unwrap();
    assert_eq!((first.finished, first.evidence), (Some(true), Evidence::HostReturn));
    for r in 0..2 {
        let pid: u32 = std::fs::read_to_string(dir.join(format!("work/grandchild.{r}"))).unwrap().trim().parse().unwrap();
        assert!(gone(pid), "rank {r}'s grandchild {pid} survived the watchdog");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failing_rank_ends_the_run_at_once_with_its_message() {
    let dir = std::env::temp_dir().join(format!("cuorder-hw-failing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let exe = fake_rank(
        &dir,
        "echo 'Ready(ns:1)' >> \"$LOG\"\n\
         if [ \"$RANK\" = 1 ]; then echo 'Fatal(message:\"boom on purpose\")' >> \"$LOG\"; echo oops >&2; exit 1; fi\n\
         exec sleep 600",
    );
    let started = Instant::now();
    let o = run(&program(), &opts(&dir, exe, Duration::from_secs(60))).unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    match &o.outcome {
        Outcome::Failed { rank: Some(1), message } => {
            assert!(message.contains("boom on purpose") && message.contains("oops"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
