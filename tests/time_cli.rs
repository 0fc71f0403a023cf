//! `cuorder time`, `run --timeline`, `replay` and `shrink` at their edges (found by a new user trying the README;
//! each test names what broke): out-of-range `--lanes` and `--jitter` are refused instead of panicking, `--format
//! json` load errors are JSON, `--jitter` is recorded beside the seed (report, JSON, trace), a kernel named `compute` is drawn `C`, not the copy mark `c`, a cost file with an unknown field is refused and a loaded file is named in reports,
//! `run --seed N --timeline` records N, and an artifact moved with its program still replays.

use std::process::Command;

fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cuorder")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

const L3: &str = "examples/streams/L3-event-orders-streams.ron";

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("cuorder-time-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// `cuorder gen pipeline --schedule 1f1b --stages S --microbatches M [FLAGS] -o NAME` in the test's temporary
/// directory; the file's path.
fn gen_1f1b(name: &str, stages: u32, microbatches: u32, flags: &[&str]) -> std::path::PathBuf {
    let p = tmp(name);
    let (s, m) = (stages.to_string(), microbatches.to_string());
    let mut args = vec!["gen", "pipeline", "--schedule", "1f1b", "--stages", &s, "--microbatches", &m];
    args.extend_from_slice(flags);
    args.extend(["-o", p.to_str().unwrap()]);
    let (code, _, err) = cli(&args);
    assert_eq!(code, 0, "{err}");
    p
}

/// A program file `name` with `text` in the test's temporary directory.
fn program_file(name: &str, text: &str) -> std::path::PathBuf {
    let p = tmp(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn lanes_65536_panicked_formatting_now_refused() {
    let (code, _, err) = cli(&["time", L3, "--lanes", "65536"]);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (code, out, _) = cli(&["time", L3, "--lanes", "1000"]);
    assert_eq!(code, 0);
    assert!(out.contains("legend:"));
}

#[test]
fn jitter_u64_max_panicked_in_rng_now_refused() {
    let (code, _, err) = cli(&["time", L3, "--jitter", "18446744073709551615"]);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn jitter_was_not_recorded_so_a_saved_report_could_not_be_reproduced() {
    let trace = tmp("jitter-trace.json");
    let (code, out, err) = cli(&["time", L3, "--seed", "4", "--jitter", "2500", "--timeline", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().next().unwrap().contains("(seed 4, jitter 2500 ns;"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert_eq!(v["otherData"]["seed"], 4);
    assert_eq!(v["otherData"]["jitter_ns"], 2500);
    let (_, json, _) = cli(&["time", L3, "--seed", "4", "--jitter", "2500", "--format", "json"]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!((j["time"]["seed"].as_u64(), j["time"]["jitter_ns"].as_u64()), (Some(4), Some(2500)));
    // The recorded pair reproduces the run: the same makespan as the first.
    let (_, again, _) = cli(&["time", L3, "--seed", "4", "--jitter", "2500"]);
    assert_eq!(again, out);
    let (_, plain, _) = cli(&["time", L3]);
    assert!(!plain.lines().next().unwrap().contains("jitter"), "{plain}");
}

#[test]
fn kernel_named_compute_was_drawn_c_like_a_copy() {
    let prog = program_file(
        "compute.ron",
        "Program(ranks: 1, streams: [Stream(\"sA\", NonBlocking)], buffers: [Buffer(\"a\", \"32 MiB\"), \
         Buffer(\"p\", \"32 MiB\", space: PinnedHost)], threads: [Thread(\"host\", [Kernel(\"compute\", stream: \"sA\", \
         writes: [\"a\"], duration: \"2 ms\"), StreamSync(\"sA\"), Memcpy(dst: \"p\", src: \"a\")])])\n",
    );
    let (code, out, err) = cli(&["time", prog.to_str().unwrap(), "--lanes", "40"]);
    assert_eq!(code, 0, "{err}");
    let row = |name: &str| out.lines().find(|l| l.starts_with(name) && l.ends_with('|')).unwrap_or_else(|| panic!("no {name} row: {out}")).to_string();
    // The kernel's lane shows only its letter; the copy (on the legacy stream sL) only `c`.
    let s_a = row("r0 sA ");
    assert!(s_a.contains('C') && !s_a.contains('c'), "{out}");
    assert!(out.contains("C compute"), "{out}");
    assert!(row("r0 sL ").contains('c'), "{out}");
}

#[test]
fn legend_hid_a_second_kernel_name_and_a_host_func_was_drawn_as_a_copy() {
    let prog = program_file(
        "legend.ron",
        "Program(ranks: 1, streams: [Stream(\"s0\", NonBlocking), Stream(\"s1\", NonBlocking)], threads: [Thread(\"main\", [\
         Kernel(\"fwd\", stream: \"s0\", duration: \"1 ms\"), Kernel(\"flush\", stream: \"s1\", duration: \"1 ms\"), \
         Kernel(\"fwd\", stream: \"s0\", duration: \"1 ms\"), HostFunc(\"log\", stream: \"s1\", duration: \"1 ms\"), DeviceSync])])\n",
    );
    let trace = tmp("legend.json");
    let (code, out, err) = cli(&["time", prog.to_str().unwrap(), "--lanes", "40", "--timeline", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // The legend lists distinct names (it said "F fwd (and 2 more kernels)": flush was never named, and the second
    // fwd counted as another kernel).
    assert!(out.contains("F fwd, flush;"), "{out}");
    let s1 = out.lines().find(|l| l.starts_with("r0 s1") && l.ends_with('|')).unwrap();
    assert!(s1.contains('h') && !s1.contains('c'), "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let cats: Vec<&str> = v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").map(|e| e["cat"].as_str().unwrap()).collect();
    assert!(cats.contains(&"host_func") && !cats.contains(&"copy"), "{cats:?}");
}

#[test]
fn watchdog_timeout_said_completed_and_exited_0() {
    // Rank 0 receives a message rank 1 never sends; the communicator's watchdog (N9) aborts the hang after 30 s.
    // `check` says "timeout" and exits 1; `time` said "completed" and exited 0, and the trace did not mark it.
    let prog = program_file(
        "watchdog.ron",
        "Program(ranks: 2, streams: [Stream(\"s0\", NonBlocking)], buffers: [Buffer(\"x\", \"4 KiB\"), Buffer(\"y\", \"4 KiB\")], \
         comms: [Comm(\"world\", watchdog: \"30 s\")], threads: [Thread(\"main\", [Group([Send(to: Next, buf: \"x\", stream: \"s0\"), \
         Recv(from: Prev, buf: \"y\", stream: \"s0\")]), StreamSync(\"s0\"), OnRanks([0], [Recv(from: Rank(1), buf: \"y\", stream: \"s0\"), \
         StreamSync(\"s0\")])])])\n",
    );
    let p = prog.to_str().unwrap();
    let (check_code, _, _) = cli(&["check", p]);
    assert_eq!(check_code, 1);
    // Its JSON rules named N9 but not N13, which the finding's text cites (the abort).
    let (_, json, _) = cli(&["check", p, "--format", "json"]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rules = j["check"]["findings"][0]["rules"].as_array().unwrap();
    assert!(rules.contains(&"N9".into()) && rules.contains(&"N13".into()), "{json}");
    let trace = tmp("watchdog.json");
    let (code, out, err) = cli(&["time", p, "--timeline", trace.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("outcome: timeout"), "{out}");
    let (code, json, _) = cli(&["time", p, "--format", "json"]);
    assert_eq!(code, 1);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["time"]["outcome"], "timeout");
    assert_eq!(j["exit_code"], 1);
    assert!(j["time"]["findings"].as_array().unwrap().iter().any(|f| f["kind"] == "timeout" && f["at_ns"].as_u64() > Some(30_000_000_000)), "{json}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert!(v["traceEvents"].as_array().unwrap().iter().any(|e| e["name"] == "timeout" && e["cat"] == "finding"));
    // `run` of the same program said "outcome: completed" too.
    let (_, out, _) = cli(&["run", p]);
    assert!(out.contains("outcome: timeout: a watchdog aborted a hang"), "{out}");
}

#[test]
fn watched_collective_outliving_its_timeout_completed_without_a_word() {
    // After a warm-up (its lazy connection set-up takes 200 ms under h200-nvlink), rank 0 computes 1 s before an
    // all-reduce that rank 1 is already in; the communicator's watchdog times out after 500 ms. ProcessGroupNCCL
    // times work from its call and aborts it once older than the timeout (N9): both ranks' second all-reduces are
    // 1 s old when they end. `time` said "completed" and exited 0; the model fires a watchdog only on a hang, so
    // the run still completes, and the overdue work is reported.
    let text = |timeout: &str| {
        format!(
            "Program(ranks: 2, streams: [Stream(\"s\", NonBlocking)], buffers: [Buffer(\"x\", \"4 KiB\")], \
             comms: [Comm(\"world\", watchdog: \"{timeout}\")], threads: [Thread(\"main\", [AllReduce(buf: \"x\", stream: \"s\"), \
             StreamSync(\"s\"), OnRanks([0], [Kernel(\"compute\", stream: \"s\", writes: [\"x\"], duration: \"1 s\")]), \
             AllReduce(buf: \"x\", stream: \"s\"), StreamSync(\"s\")])])\n"
        )
    };
    let prog = program_file("overdue.ron", &text("500 ms"));
    let p = prog.to_str().unwrap();
    let trace = tmp("overdue.json");
    let (code, out, err) = cli(&["time", p, "--timeline", trace.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("outcome: completed"), "{out}");
    let overdue: Vec<&str> = out.lines().filter(|l| l.starts_with("overdue at ")).collect();
    assert_eq!(overdue.len(), 2, "{out}");
    assert!(overdue.iter().any(|l| l.contains("r0 main #3 all_reduce")) && overdue.iter().any(|l| l.contains("r1 main #2 all_reduce")), "{out}");
    assert!(overdue.iter().all(|l| l.contains("past the watchdog's 500.000 ms")), "{out}");
    assert_eq!(out.matches("ProcessGroupNCCL aborts work older than its timeout (N9)").count(), 1, "said once: {out}");
    let (code, json, _) = cli(&["time", p, "--format", "json"]);
    assert_eq!(code, 1);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    let found: Vec<&serde_json::Value> = j["time"]["findings"].as_array().unwrap().iter().filter(|f| f["kind"] == "overdue").collect();
    assert_eq!(found.len(), 2, "{json}");
    // Each fires 500 ms after its call (at about 200 ms), long before the all-reduce ends (about 1.2 s).
    let makespan = j["time"]["makespan_ns"].as_u64().unwrap();
    assert!(found.iter().all(|f| (700_000_000..710_000_000).contains(&f["at_ns"].as_u64().unwrap())), "{json}");
    assert!(makespan > 1_200_000_000, "{json}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert_eq!(v["traceEvents"].as_array().unwrap().iter().filter(|e| e["name"] == "overdue" && e["cat"] == "finding").count(), 2);
    // A 16-stage pipeline issued ahead under a 10 ms watchdog: 183 overdue launches; the text lists the first 10
    // in time, then a count (the JSON lists all).
    let pipe = gen_1f1b("overdue-pipeline.ron", 16, 8, &[]);
    let pipe_text = std::fs::read_to_string(&pipe).unwrap().replace("Comm(\"pp\")", "Comm(\"pp\", watchdog: \"10 ms\")");
    std::fs::write(&pipe, pipe_text).unwrap();
    let (code, out, _) = cli(&["time", pipe.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(out.lines().filter(|l| l.starts_with("overdue at ")).count(), 10, "{out}");
    assert!(out.contains("… 173 more overdue launches (--format json lists all)"), "{out}");
    let (_, json, _) = cli(&["time", pipe.to_str().unwrap(), "--format", "json"]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    let at: Vec<u64> = j["time"]["findings"].as_array().unwrap().iter().filter(|f| f["kind"] == "overdue").map(|f| f["at_ns"].as_u64().unwrap()).collect();
    assert_eq!(at.len(), 183);
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "in time order");
    // With a timeout longer than the wait, nothing is overdue.
    let prog = program_file("watched-in-time.ron", &text("2 s"));
    let (code, out, err) = cli(&["time", prog.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("overdue at"), "{out}");
}

#[test]
fn overdue_missed_work_the_model_aborted_later_deferred_work_and_work_cut_by_the_step_limit() {
    // Found by a fresh tester of the first version of `overdue` (N9).
    let overdue = |file: &str, text: &str, args: &[&str]| -> Vec<String> {
        let p = program_file(file, text);
        let mut a = vec!["time", p.to_str().unwrap(), "--costs", "ideal"];
        a.extend_from_slice(args);
        let (_, out, err) = cli(&a);
        assert!(err.is_empty() || !err.contains("panicked"), "{err}");
        out.lines().filter(|l| l.starts_with("overdue at ")).map(str::to_string).collect()
    };
    // 1. Rank 0's send waits 1 s behind a kernel, then hangs (rank 1 never receives): ProcessGroupNCCL aborts it
    //    500 ms after the call; the model's watchdog aborts the hang at 1.5 s. Skipped as "the timeout the run
    //    already reports", it was never said that the abort comes a second earlier.
    let hang = "Program(ranks: 2, streams: [Stream(\"s0\", NonBlocking)], buffers: [Buffer(\"x\", \"64 MiB\"), Buffer(\"y\", \"64 MiB\")], \
        comms: [Comm(\"world\", watchdog: \"500 ms\")], threads: [Thread(\"main\", [Group([Send(to: Next, buf: \"x\", stream: \"s0\"), \
        Recv(from: Prev, buf: \"y\", stream: \"s0\")]), StreamSync(\"s0\"), OnRanks([0], [Kernel(\"long\", stream: \"s0\", duration: \"1 s\"), \
        Send(to: Rank(1), buf: \"x\", stream: \"s0\")]), StreamSync(\"s0\")])])\n";
    let o = overdue("overdue-hang.ron", hang, &["--profile", "eager"]);
    assert_eq!(o.len(), 1, "{o:?}");
    assert!(o[0].starts_with("overdue at 500.000 ms: r0 main #6 send(to r1"), "{o:?}");
    // 2. A non-blocking communicator defers the work to the poll (N12): it was timed from the poll (rank 0 polls
    //    after sleeping 1 s, so its send was not reported) and named after it.
    let nb = "Program(ranks: 2, streams: [Stream(\"s0\", NonBlocking)], buffers: [Buffer(\"x\", \"64 MiB\")], \
        comms: [Comm(\"nb\", config: NonBlocking, watchdog: \"300 ms\")], threads: [Thread(\"main\", [\
        OnRanks([0], [Send(to: Rank(1), buf: \"x\", stream: \"s0\"), Sleep(\"1 s\"), Poll(\"nb\")]), \
        OnRanks([1], [Recv(from: Rank(0), buf: \"x\", stream: \"s0\"), Poll(\"nb\")]), StreamSync(\"s0\")])])\n";
    let o = overdue("overdue-nb.ron", nb, &[]);
    assert_eq!(o.len(), 2, "{o:?}");
    assert!(o[0].starts_with("overdue at 300.000 ms: r0 main #0 send(to r1") && o[0].contains("enqueued by #2 poll(nb)"), "{o:?}");
    assert!(o[1].starts_with("overdue at 300.000 ms: r1 main #0 recv(from r0") && o[1].contains("enqueued by #1 poll(nb)"), "{o:?}");
    // 3. Work still running when --max-steps stops the run was dropped, though past its deadline.
    let slow = "Program(ranks: 2, streams: [Stream(\"s0\", NonBlocking)], buffers: [Buffer(\"g\", \"4 KiB\")], \
        comms: [Comm(\"world\", watchdog: \"500 ms\")], threads: [Thread(\"main\", [OnRanks([0], [Kernel(\"k\", stream: \"s0\", duration: \"1 s\")]), \
        AllReduce(buf: \"g\", stream: \"s0\"), StreamSync(\"s0\")])])\n";
    let o = overdue("overdue-cut.ron", slow, &["--max-steps", "10"]);
    assert_eq!(o.len(), 2, "{o:?}");
    // What was found before the limit decides the exit code, as in `check`: 1, not the limit's 3.
    let cut = tmp("overdue-cut.ron");
    assert_eq!(cli(&["time", cut.to_str().unwrap(), "--costs", "ideal", "--max-steps", "10"]).0, 1);
    assert_eq!(cli(&["time", cut.to_str().unwrap(), "--costs", "ideal", "--max-steps", "2"]).0, 3);
    assert!(o.iter().all(|l| l.contains("still running when the run stopped")), "{o:?}");
    assert_eq!(overdue("overdue-whole.ron", slow, &[]).len(), 2);
}

#[test]
fn overdue_after_the_models_abort_findings_out_of_time_order_and_a_witness_not_called_a_timeout() {
    // Found by a second fresh tester.
    // 1. Rank 0 hangs in an all-reduce (rank 1 skips it), then calls another 8 us later. The watchdog aborts the
    //    communicator when the first is due (1 s after its call, as ProcessGroupNCCL times it; it fired 1 s after
    //    the launch started, a few us later), before the second is due: the abort ends both, so neither is overdue
    //    (the second was reported 2 us after the abort, and the first a few us before it, twice for one hang).
    let p = program_file(
        "overdue-after-abort.ron",
        "Program(ranks: 2, streams: [Stream(\"s0\", NonBlocking)], buffers: [Buffer(\"g\", \"4 KiB\")], \
         comms: [Comm(\"w\", watchdog: \"1 s\")], threads: [Thread(\"main\", [AllReduce(buf: \"g\", stream: \"s0\"), StreamSync(\"s0\"), \
         OnRanks([0], [AllReduce(buf: \"g\", stream: \"s0\"), Sleep(\"8 us\"), AllReduce(buf: \"g\", stream: \"s0\"), StreamSync(\"s0\")])])])\n",
    );
    let (code, out, _) = cli(&["time", p.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.contains("timeout at 1.200 s") && !out.contains("overdue at"), "{out}");
    // 2. Findings in time order (docs/json.md): rank 0 hangs on communicator w1 (1 s watchdog) while a 20 s kernel
    //    keeps the run going; work on w2 (10 s) waits behind the kernel. ProcessGroupNCCL aborts at 1.4 s and
    //    10.4 s; the model's watchdog only once everything is stuck, at 20.4 s. The overdue work came after the
    //    timeout in the text and the JSON.
    let p2 = program_file(
        "overdue-order.ron",
        "Program(ranks: 2, streams: [Stream(\"s0\", NonBlocking), Stream(\"s1\", NonBlocking)], buffers: [Buffer(\"g\", \"4 KiB\"), Buffer(\"h\", \"4 KiB\")], \
         comms: [Comm(\"w1\", watchdog: \"1 s\"), Comm(\"w2\", watchdog: \"10 s\")], threads: [Thread(\"main\", [\
         AllReduce(buf: \"g\", stream: \"s0\", comm: \"w1\"), AllReduce(buf: \"h\", stream: \"s1\", comm: \"w2\"), StreamSync(\"s0\"), StreamSync(\"s1\"), \
         Kernel(\"slow\", stream: \"s1\", duration: \"20 s\"), AllReduce(buf: \"h\", stream: \"s1\", comm: \"w2\"), \
         OnRanks([0], [AllReduce(buf: \"g\", stream: \"s0\", comm: \"w1\")]), StreamSync(\"s0\")])])\n",
    );
    let (_, out, _) = cli(&["time", p2.to_str().unwrap()]);
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("timeout at") || l.starts_with("overdue at")).collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("overdue at 1.400 s: r0 main #6") && lines[3].starts_with("timeout at 20.400 s"), "{out}");
    let (_, json, _) = cli(&["time", p2.to_str().unwrap(), "--format", "json"]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    let at: Vec<u64> = j["time"]["findings"].as_array().unwrap().iter().map(|f| f["at_ns"].as_u64().unwrap()).collect();
    assert_eq!(at.len(), 4, "{json}");
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "{json}");
    // 3. `run --witness` of the timeout said "end of the replayed schedule".
    let (_, out, _) = cli(&["run", p.to_str().unwrap(), "--witness", "1"]);
    assert!(out.contains("outcome: timeout: a watchdog aborted a hang"), "{out}");
    // 4. A run stopped exactly when ProcessGroupNCCL would fire (the call's return: set-up outlasts the 100 ms
    //    watchdog) with the launch unfinished was not reported.
    let p = program_file(
        "overdue-at-the-stop.ron",
        "Program(ranks: 2, streams: [Stream(\"s0\", NonBlocking)], buffers: [Buffer(\"g\", \"4 KiB\")], \
         comms: [Comm(\"w\", watchdog: \"100 ms\")], threads: [Thread(\"main\", [Kernel(\"long\", stream: \"s0\", duration: \"1 s\"), \
         AllReduce(buf: \"g\", stream: \"s0\"), StreamSync(\"s0\")])])\n",
    );
    let (code, out, _) = cli(&["time", p.to_str().unwrap(), "--max-steps", "7"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("overdue at 200.008 ms") && l.contains("still running when the run stopped")).count(), 2, "{out}");
}

#[test]
fn time_json_errors_after_loading_printed_nothing() {
    // A cost model that does not load, a trace path that cannot be written, a run past 2^64 - 1 ns: exit 2 with
    // nothing on stdout under --format json (docs/json.md promises an `errors` array).
    let huge = tmp("huge.ron");
    std::fs::write(&huge, "Program(ranks: 1, threads: [Thread(\"main\", [Sleep(\"18446744073709551615 ns\"), Sleep(\"1 ns\")])])\n").unwrap();
    let cases: [(&[&str], &str); 3] = [
        (&["time", L3, "--costs", "/nonexistent/costs.ron"], "/nonexistent/costs.ron"),
        (&["time", L3, "--timeline", "/nonexistent/dir/t.json"], "/nonexistent/dir/t.json"),
        (&["time", huge.to_str().unwrap()], huge.to_str().unwrap()),
    ];
    for (args, file) in cases {
        let (code, out, _) = cli(&[args, &["--format", "json"]].concat());
        assert_eq!(code, 2, "{args:?}: {out}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out:?}"));
        assert_eq!((v["exit_code"].as_u64(), v["errors"][0]["file"].as_str()), (Some(2), Some(file)), "{out}");
        let (code, text, err) = cli(args);
        assert_eq!((code, text.as_str()), (2, ""), "{args:?}");
        assert!(err.contains("error: "), "{err}");
    }
    // The saturation error names the step that reached it and says the cost model may be the cause.
    let (_, _, err) = cli(&["time", huge.to_str().unwrap()]);
    assert!(err.contains("sleep(18446744073709551615 ns)") && err.contains("cost model (h200-nvlink)"), "{err}");
    // A kernel, host function or collective whose cost passes 2^64 - 1 ns saturates too: the launch overhead was
    // added to a kernel's duration unchecked (a debug build panicked with "attempt to add with overflow", a release
    // build wrapped to a few nanoseconds).
    let kernel = program_file(
        "huge-kernel.ron",
        "Program(ranks: 2, streams: [Stream(\"s\", NonBlocking)], buffers: [Buffer(\"g\", \"1 MiB\")], comms: [Comm(\"world\")], \
         threads: [Thread(\"main\", [Kernel(\"k\", stream: \"s\", duration: 18446744073709551615), \
         HostFunc(\"h\", stream: \"s\", duration: 18446744073709551615), AllReduce(buf: \"g\", stream: \"s\"), StreamSync(\"s\")])])\n",
    );
    let (code, out, err) = cli(&["time", kernel.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("kernel k(s)") && err.contains("where times saturate"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn ignored_flags_and_timeline_dash_were_silently_accepted() {
    // --lanes and --compare did nothing with --format json; --timeline - wrote a file named "-".
    for flag in [&["--lanes", "40"][..], &["--compare", "traces/none.ron"][..]] {
        let (code, out, _) = cli(&[&["time", L3, "--format", "json"][..], flag].concat());
        assert_eq!(code, 2, "{flag:?}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(v["errors"][0]["message"].as_str().unwrap().contains(flag[0]), "{out}");
    }
    let dir = tmp("dash");
    std::fs::create_dir_all(&dir).unwrap();
    for cmd in ["time", "run"] {
        let out = Command::new(env!("CARGO_BIN_EXE_cuorder"))
            .args([cmd, &format!("{}/{L3}", env!("CARGO_MANIFEST_DIR")), "--timeline", "-"])
            .current_dir(&dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--timeline -"), "{cmd}");
        assert!(!dir.join("-").exists(), "{cmd} wrote a file named -");
    }
}

#[test]
fn long_critical_path_hid_its_last_steps() {
    // The text showed the first 40 steps and "… N more", so what ended the run was never shown.
    let prog = gen_1f1b("p8.ron", 8, 8, &[]);
    let (_, out, _) = cli(&["time", prog.to_str().unwrap()]);
    let makespan: String = out.lines().find(|l| l.starts_with("makespan: ")).unwrap().split(" (").next().unwrap()["makespan: ".len()..].to_string();
    let path: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("critical path:")).skip(1).take_while(|l| !l.is_empty()).collect();
    assert!(path.iter().any(|l| l.contains("more (--format json lists all)")), "{out}");
    assert_eq!(path.len(), 41, "{out}");
    let last = path.last().unwrap();
    assert!(last.split('→').nth(1).unwrap().trim_start().starts_with(&makespan), "last row {last:?}, makespan {makespan}");
}

#[test]
fn logical_costs_printed_steps_as_nanoseconds_without_saying_so() {
    let (code, out, _) = cli(&["time", L3, "--costs", "logical"]);
    assert_eq!(code, 0);
    assert!(out.lines().nth(1).unwrap().starts_with("(logical costs: every step takes 1 unit"), "{out}");
    let (_, real, _) = cli(&["time", L3]);
    assert!(!real.contains("logical costs"), "{real}");
}

#[test]
fn stale_reads_were_dropped_by_run_and_time() {
    // `check` reports a stale read (V1) here; `run` and `time` listed only the race.
    let prog = program_file(
        "expect.ron",
        "Program(ranks: 1, streams: [Stream(\"s0\", NonBlocking), Stream(\"s1\", NonBlocking)], buffers: [Buffer(\"x\", \"4 KiB\")], \
         threads: [Thread(\"main\", [Kernel(\"fwd\", stream: \"s0\", writes: [\"x\"]), Expect(\"x\", written_by: Kernel(\"fwd\"), stream: \"s1\"), \
         DeviceSync])])\n",
    );
    let p = prog.to_str().unwrap();
    let (_, check, _) = cli(&["check", p]);
    assert!(check.contains("stale read"), "{check}");
    let (_, run, _) = cli(&["run", p]);
    assert!(run.contains("stale read: r0 main #1 expect(x"), "{run}");
    let trace = tmp("expect.json");
    let (code, text, _) = cli(&["time", p, "--timeline", trace.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(text.contains("stale read at "), "{text}");
    let (_, json, _) = cli(&["time", p, "--format", "json"]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(j["time"]["findings"].as_array().unwrap().iter().any(|f| f["kind"] == "stale read"), "{json}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert!(v["traceEvents"].as_array().unwrap().iter().any(|e| e["name"] == "stale read" && e["cat"] == "finding"));
}

#[test]
fn in_place_collective_race_was_counted_twice_by_run_and_time() {
    // An in-place all_reduce reads and writes g: two accesses against one kernel write, one race per rank for
    // `check`, two for `run` and `time`.
    let prog = program_file(
        "inplace.ron",
        "Program(ranks: 2, streams: [Stream(\"c\", NonBlocking), Stream(\"n\", NonBlocking)], buffers: [Buffer(\"g\", \"8 MiB\")], \
         comms: [Comm(\"world\")], threads: [Thread(\"main\", [Kernel(\"bwd\", stream: \"c\", writes: [\"g\"], duration: \"1 ms\"), \
         AllReduce(buf: \"g\", stream: \"n\"), DeviceSync])])\n",
    );
    let p = prog.to_str().unwrap();
    let (_, check, _) = cli(&["check", p]);
    assert!(check.contains("2 data races"), "{check}");
    let (_, run, _) = cli(&["run", p]);
    assert_eq!(run.matches("data race: ").count(), 2, "{run}");
    let (_, json, _) = cli(&["time", p, "--format", "json"]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["time"]["races"], 2, "{json}");
}

#[test]
fn torch_overrides_were_not_recorded_by_time_and_run() {
    // `--torch-init lazy` changes the program (ops are renumbered), yet `time` and `run` did not say it was given.
    let prog = "examples/torch/pipeline-1f1b.ron";
    let trace = tmp("torch.json");
    let (code, out, err) = cli(&["time", prog, "--torch-init", "lazy", "--timeline", trace.to_str().unwrap()]);
    assert!(code == 0 || code == 1, "{err}");
    assert!(out.contains("PyTorch calls lowered with --torch-init lazy"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert_eq!(v["otherData"]["settings"], serde_json::json!(["--torch-init lazy"]));
    let (_, json, _) = cli(&["time", prog, "--torch-init", "lazy", "--format", "json"]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["time"]["settings"], serde_json::json!(["--torch-init lazy"]));
    let (_, plain, _) = cli(&["time", prog, "--format", "json"]);
    let p: serde_json::Value = serde_json::from_str(&plain).unwrap();
    assert_eq!(p["time"]["settings"], serde_json::json!([]));
    let (_, run, _) = cli(&["run", prog, "--torch-init", "lazy"]);
    assert!(run.starts_with("PyTorch calls lowered with --torch-init lazy"), "{run}");
}

#[test]
fn time_json_load_errors_are_json() {
    let bad = tmp("bad.ron");
    std::fs::write(&bad, "Program(ranks: 1, threads: [Thread(\"main\", [Kernel(\"k\", stream: \"nope\")])])\n").unwrap();
    let (code, out, _) = cli(&["time", bad.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["command"], "time");
    assert!(v["errors"][0]["line"].is_u64(), "{out}");
}

#[test]
fn cost_file_unknown_field_refused_and_file_named_in_reports() {
    let (_, ron_text, _) = cli(&["costs", "h200-nvlink"]);
    let extra = tmp("extra.ron");
    std::fs::write(&extra, ron_text.replacen("launch_ns:", "extra_knob: 5,\n    launch_ns:", 1)).unwrap();
    let (code, _, err) = cli(&["time", L3, "--costs", extra.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("extra_knob"), "{err}");
    let good = tmp("good.ron");
    std::fs::write(&good, &ron_text).unwrap();
    let (code, out, _) = cli(&["time", L3, "--costs", good.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains(&format!("costs h200-nvlink ({})", good.display())), "{out}");
    // `cuorder costs FILE` prints the file's model as it is: it printed the report's name "h200-nvlink (FILE)", so
    // each round trip through a file added another suffix.
    let (code, again, _) = cli(&["costs", good.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(again, ron_text);
}

#[test]
fn run_seed_3_timeline_recorded_seed_0() {
    let t = tmp("r3.json");
    let (code, _, err) = cli(&["run", L3, "--seed", "3", "--timeline", t.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&t).unwrap()).unwrap();
    assert_eq!(v["otherData"]["seed"], 3);
    // Which command made a trace, and so what its seed means (a new user could not tell a `run --seed 3` trace
    // from a `time --seed 3` one).
    assert_eq!(v["otherData"]["command"], "cuorder run");
    let t2 = tmp("t3.json");
    let (code, _, _) = cli(&["time", L3, "--seed", "3", "--timeline", t2.to_str().unwrap()]);
    assert_eq!(code, 0);
    let w: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&t2).unwrap()).unwrap();
    assert_eq!((w["otherData"]["command"].as_str(), w["otherData"]["seed"].as_u64()), (Some("cuorder time"), Some(3)));
    assert_ne!(v["otherData"]["seed_role"], w["otherData"]["seed_role"]);
}

#[test]
fn artifact_moved_with_its_program_still_replays() {
    let d = std::env::temp_dir().join(format!("cuorder-moved-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/megatron-batch-p2p-race.ron"), d.join("p.ron")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cuorder")).args(["explore", "p.ron", "--first", "--save", "finds"]).current_dir(&d).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    // The artifact records "p.ron" (relative to where explore ran); replay it from elsewhere, program beside it.
    std::fs::rename(d.join("p.ron"), d.join("finds/p.ron")).unwrap();
    let art = std::fs::read_dir(d.join("finds")).unwrap().map(|e| e.unwrap().path()).find(|p| p.to_string_lossy().contains("finding-1")).unwrap();
    let (code, out, err) = cli(&["replay", art.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("reproduced"), "{out}");
    // Gone altogether: the artifact's own copy of the program is shrunk.
    std::fs::remove_file(d.join("finds/p.ron")).unwrap();
    let (code, out, err) = cli(&["shrink", art.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    // An artifact without the text (a program over 1 MiB, or saved before artifacts held it): a clear error naming
    // the recorded path and --program.
    let mut a = cuorder::artifact::load(&art).unwrap();
    a.program_text = None;
    std::fs::write(&art, ron::ser::to_string_pretty(&a, ron::ser::PrettyConfig::default()).unwrap()).unwrap();
    let (code, _, err) = cli(&["shrink", art.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("p.ron, is not there") && err.contains("--program FILE"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// Two kernels of 9,999,999,999 s each made the makespan saturate at 2^64 - 1 ns and `time` printed it as a result
/// (exit 0); it is an error now (exit 2) that says why.
#[test]
fn saturated_makespan_was_printed_as_a_result_now_refused() {
    let p = tmp("huge.ron");
    std::fs::write(
        &p,
        r#"Program(ranks: 1, streams: [Stream("s", NonBlocking)], buffers: [Buffer("x", 4096)], threads: [Thread("main", [
            Kernel("a", stream: "s", writes: ["x"], duration: "9999999999 s"),
            Kernel("b", stream: "s", writes: ["x"], duration: "9999999999 s"),
            DeviceSync,
        ])])"#,
    )
    .unwrap();
    let (code, out, err) = cli(&["time", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("where times saturate"), "{err}");
}

/// `time` had no wall-clock budget (the new-user trial of 2026-12-03: a timed 4,096-stage pipeline could only be
/// bounded by --max-steps, a number of steps the user cannot guess). `--max-time-s` stops the run like --max-steps:
/// the report covers the steps taken, exit 3 with no finding, outcome `time limit` in JSON.
#[test]
fn time_had_no_wall_clock_budget() {
    let p = gen_1f1b("budget-1f1b.ron", 16, 8, &[]);
    let file = p.to_str().unwrap();
    let (code, out, _) = cli(&["time", file, "--max-time-s", "0"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("stopped at the time limit after 0 steps (0 ms)"), "{out}");
    let (code, out, _) = cli(&["time", file, "--max-time-s", "0", "--format", "json"]);
    assert_eq!(code, 3, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["time"]["outcome"], "time limit", "{out}");
    assert_eq!(v["exit_code"], 3);
    // A limit the run stays within changes nothing.
    let (code, within, _) = cli(&["time", file, "--max-time-s", "600"]);
    let (_, plain, _) = cli(&["time", file]);
    assert_eq!((code, within), (0, plain));
    let (code, _, err) = cli(&["time", file, "--max-time-s", "-1"]);
    assert_eq!(code, 2, "{err}");
}

/// `cuorder time` of a pipeline printed a makespan of 1.4 s for 8 stages of 4 x 3 ms with no word that it was almost
/// all connection set-up (N7), which a job pays in its first iteration only, and offered no way to time a later
/// iteration but writing a cost model file. The report now breaks the critical path down by kind of step, says when
/// most of it is set-up, and `--connect-ns` replaces the set-up cost.
#[test]
fn a_pipeline_makespan_did_not_say_it_was_mostly_connection_setup() {
    let p = gen_1f1b("setup-1f1b.ron", 8, 4, &[]);
    let file = p.to_str().unwrap();
    let (code, out, err) = cli(&["time", file]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("where it goes (the critical path's time by kind of step):\n  connection set-up (N7)"), "{out}");
    assert!(out.contains("note: 99.4% of this makespan is NCCL's lazy connection set-up (N7)"), "{out}");
    assert!(out.contains("`--connect-ns 0` times the program as a later iteration runs"), "{out}");
    let (code, out, err) = cli(&["time", file, "--connect-ns", "0"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("costs h200-nvlink, --connect-ns 0 (seed 0;"), "{out}");
    assert!(out.contains("makespan: 34.356 ms"), "{out}");
    assert!(!out.contains("connection set-up (N7)") && !out.contains("note:"), "{out}");
    // JSON: the parts, most first, adding up to the makespan.
    let (code, out, _) = cli(&["time", file, "--format", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let parts = v["time"]["critical_parts"].as_array().unwrap();
    assert_eq!(parts[0]["part"], "connection_setup", "{out}");
    assert_eq!(parts[0]["steps"], 14);
    let total: u64 = parts.iter().map(|p| p["ns"].as_u64().unwrap()).sum();
    assert_eq!(total, v["time"]["makespan_ns"].as_u64().unwrap());
    // Under logical costs every step costs 1: the flag would change nothing, so it is refused.
    let (code, _, err) = cli(&["time", file, "--costs", "logical", "--connect-ns", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("--connect-ns has no effect under logical costs"), "{err}");
}

/// `cuorder time` of the send-first exchange, which hung on the H200s and which `check` reports as a deadlock, said
/// "outcome: completed" and exited 0 (new-user trial): the timed platform is as generous as the profile allows, and
/// it delivered both 2 GiB sends eagerly beyond the guaranteed window (N2). Such a run is now run again taking only
/// guaranteed steps, and its deadlock is a finding, exit 1; a correct pipeline that also took such steps is not.
#[test]
fn time_said_completed_for_a_program_that_hangs_without_eager_delivery() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/nccl-1456-send-first-connected.ron");
    let (code, out, err) = cli(&["time", file]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("outcome: completed\ndeadlock when withheld: this execution completed only through 2 steps that profile portable does not guarantee (the first: r0 s0: #6 send(to r1, x, 2 GiB, s0, world) delivers eagerly); a platform that withholds them, as the profile allows, deadlocks at"), "{out}");
    assert!(out.contains("wait-for cycle:"), "{out}");
    let (code, out, _) = cli(&["time", file, "--format", "json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["time"]["unguaranteed_steps"], 2);
    assert_eq!(v["time"]["findings"][0]["kind"], "deadlock when withheld", "{out}");
    // Skipped on request: this execution alone completed (and the report says what was not checked).
    let (code, out, _) = cli(&["time", file, "--no-withheld-run"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("deadlock when withheld") && out.contains("--no-withheld-run skipped the run without them"), "{out}");
    // A correct pipeline takes eager deliveries beyond the window too, and completes without them.
    let p = gen_1f1b("withheld-1f1b.ron", 4, 4, &[]);
    let (code, out, _) = cli(&["time", p.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["time"]["unguaranteed_steps"].as_u64().unwrap() > 0, "{out}");
    // And its --bug variant (send before recv, ungrouped) hangs so.
    let p = gen_1f1b("withheld-1f1b-bug.ron", 4, 8, &["--bug"]);
    let (code, out, _) = cli(&["time", p.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("deadlock when withheld:"), "{out}");
}

/// The text report listed races in the order they were found ("data race 5 at 1.210 ms" before "data race 6 at
/// 1.055 ms" on a 1F1B 4 x 8 --race pipeline), while the JSON findings are in time order, so the numbers differed.
/// And `--jitter` was taken under logical costs, whose banner says every step takes 1 unit, and changed the times.
#[test]
fn races_were_listed_out_of_time_order_and_logical_costs_took_jitter() {
    let p = gen_1f1b("race-order-1f1b.ron", 4, 8, &["--race"]);
    let file = p.to_str().unwrap();
    let (code, out, _) = cli(&["time", file, "--connect-ns", "0"]);
    assert_eq!(code, 1, "{out}");
    let at: Vec<&str> = out.lines().filter(|l| l.starts_with("data race ")).map(|l| l.split(" at ").nth(1).unwrap().split(':').next().unwrap()).collect();
    assert!(at.len() > 10, "{out}");
    let ns: Vec<f64> = at
        .iter()
        .map(|t| {
            let (v, unit) = t.split_once(' ').unwrap();
            v.parse::<f64>().unwrap() * match unit { "ns" => 1.0, "µs" => 1e3, "ms" => 1e6, _ => 1e9 }
        })
        .collect();
    assert!(ns.windows(2).all(|w| w[0] <= w[1]), "{at:?}");
    // Its makespan (24.5 ms, against 34.4 ms for the correct pipeline) is that of kernels that did not wait for their
    // data, and the report says so before it.
    assert!(out.contains("note: the times below are those of an execution with a data race"), "{out}");
    let (code, _, err) = cli(&["time", file, "--costs", "logical", "--jitter", "3"]);
    assert_eq!(code, 2);
    assert!(err.contains("--jitter has no effect under logical costs"), "{err}");
}

/// `--connect-ns "100 ms"` and `--jitter "5 us"` were refused with "invalid digit found in string", though programs
/// write durations so; and `--lanes 10` on a 418 ms run printed its axis as "0418.353 ms".
#[test]
fn duration_flags_took_only_nanoseconds_and_the_lanes_axis_ran_into_its_end() {
    let p = gen_1f1b("units-1f1b.ron", 8, 4, &[]);
    let file = p.to_str().unwrap();
    let (code, with_unit, _) = cli(&["time", file, "--connect-ns", "10 ms", "--jitter", "5 us"]);
    assert_eq!(code, 0);
    let (_, bare, _) = cli(&["time", file, "--connect-ns", "10000000", "--jitter", "5000"]);
    assert_eq!(with_unit, bare);
    assert!(bare.contains("--connect-ns 10000000") && bare.contains("jitter 5000 ns"), "{bare}");
    let (code, _, err) = cli(&["time", file, "--connect-ns", "10 parsecs"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown unit `parsecs` (give nanoseconds, or a number with a unit: ns, us, ms, s)"), "{err}");
    let (code, _, err) = cli(&["time", file, "--jitter", "1001 s"]);
    assert_eq!(code, 2);
    assert!(err.contains("more than the largest jitter"), "{err}");
    let (_, out, _) = cli(&["time", file, "--lanes", "10"]);
    let axis = out.lines().find(|l| l.trim_start().starts_with("0 ") && !l.contains('→')).unwrap_or_else(|| panic!("{out}"));
    assert!(axis.ends_with(" 1.408 s") && axis.contains("0 "), "{axis:?}");
}

/// A report cut by `--max-steps` left out kernels still running: r0's 1 ms forward kernel, launched at 4.4 µs, was
/// in no span at 214 µs (r0 computed "0 ns", its compute stream had no row), though docs/timing.md says work in
/// progress is drawn to the end of the run; and the time the run stopped at was called its makespan.
#[test]
fn a_report_cut_by_a_limit_left_out_running_kernels() {
    let p = gen_1f1b("cut-1f1b.ron", 4, 8, &[]);
    let (code, out, _) = cli(&["time", p.to_str().unwrap(), "--max-steps", "500", "--connect-ns", "0", "--lanes", "60"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("makespan so far (stopped at the limit): 214.292 µs"), "{out}");
    assert!(out.contains("r0           204.587 µs     4.5%"), "{out}");
    assert!(out.contains("\nr0 compute     204.587 µs"), "{out}");
    assert!(out.contains("r0 compute |  FFFF"), "{out}");
    // The Chrome trace marks the kernel unfinished.
    let trace = tmp("cut-1f1b.json");
    let (code, _, _) = cli(&["time", p.to_str().unwrap(), "--max-steps", "500", "--connect-ns", "0", "--timeline", trace.to_str().unwrap()]);
    assert_eq!(code, 3);
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.contains("fwd m0 (unfinished)"), "no unfinished kernel in the trace");
}

/// `time p.ron --timeline p.ron` wrote the trace over the program (second trial); and `--no-withheld-run` on the
/// send-first exchange printed a clean "completed" with no word that the run relied on two unguaranteed steps.
#[test]
fn timeline_overwrote_the_program_and_a_skipped_withheld_run_went_unsaid() {
    let p = tmp("victim.ron");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/nccl-1456-send-first-connected.ron"), &p).unwrap();
    let before = std::fs::read_to_string(&p).unwrap();
    let other = p.parent().unwrap().join(".").join("victim.ron");
    for cmd in ["time", "run"] {
        let (code, _, err) = cli(&[cmd, p.to_str().unwrap(), "--timeline", other.to_str().unwrap()]);
        assert_eq!(code, 2, "{cmd}: {err}");
        assert!(err.contains("that is an input of this command"), "{cmd}: {err}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), before, "{cmd} overwrote the program");
    }
    let (code, out, _) = cli(&["time", p.to_str().unwrap(), "--no-withheld-run"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("note: this execution took 2 steps that profile portable does not guarantee; --no-withheld-run skipped the run without them"), "{out}");
}

/// `--torch-version before82450` on a program with no PyTorch call and no `torch:` setting (both trials: lesson L3)
/// printed "PyTorch calls lowered with --torch-version before82450 (overriding the program's `torch:`)" and recorded
/// the setting in JSON, though it changed nothing. Settings that change nothing are refused, in every command that
/// takes them; a PyTorch-dialect program still takes them.
#[test]
fn torch_settings_on_a_program_without_pytorch_were_reported_as_applied() {
    for cmd in ["check", "run", "time", "explore"] {
        let (code, out, err) = cli(&[cmd, L3, "--torch-version", "before82450", "--torch-init", "lazy"]);
        assert_eq!(code, 2, "{cmd}: {out}{err}");
        assert!(
            err.contains("--torch-version before82450, --torch-init lazy have no effect: the program makes no PyTorch call and has no `torch:` setting"),
            "{cmd}: {err}"
        );
        assert!(!out.contains("PyTorch calls lowered"), "{cmd}: {out}");
    }
    let (code, out, _) = cli(&["time", L3, "--torch-version", "before82450", "--format", "json"]);
    assert_eq!(code, 2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["errors"][0]["message"].as_str().unwrap().contains("has no effect"), "{out}");
    let (code, out, err) = cli(&["check", "examples/torch/megatron-batch-p2p.ron", "--torch-version", "before82450"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.starts_with("PyTorch calls lowered with --torch-version before82450"), "{out}");
}

/// Issue 33: `time` panicked on a stream name longer than 65,535 characters (its table padded names with a format
/// width, which Rust limits to 65,535), where `check` and `run` accept the same file. The table, `--lanes` and
/// `run`'s timeline now pad without a format width, and print the whole name.
#[test]
fn time_panicked_on_a_name_longer_than_65535_characters() {
    let name = "k".repeat(70_000);
    let path = tmp("long-name.ron");
    std::fs::write(
        &path,
        format!(
            r#"Program(ranks: 1, streams: [Stream("{name}", NonBlocking)], buffers: [Buffer("x", "1 MiB")],
            threads: [Thread("main", [Kernel("w", stream: "{name}", writes: ["x"]), DeviceSync])])"#
        ),
    )
    .unwrap();
    let p = path.to_str().unwrap();
    for args in [vec!["time", p], vec!["time", p, "--lanes", "40"], vec!["run", p]] {
        let (code, out, err) = cli(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!err.contains("panicked") && out.contains(&name), "{args:?}: {}", err.chars().take(500).collect::<String>());
    }
    let _ = std::fs::remove_file(&path);
}
